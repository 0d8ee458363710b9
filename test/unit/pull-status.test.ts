import { describe, expect, it } from 'vitest';
import { pullRefused, pullStatus, RecordQueue, type LogRecord } from '../../service/index.js';
import { eventLog } from '../../service/ingest/partition-consumer.js';

describe('pullStatus', () => {
  it('reads a heartbeat, a gone consumer and a refused pull', () => {
    expect(pullStatus(100, 'Idle Heartbeat', '', 2000)).toEqual({ kind: 'heartbeat' });
    expect(pullStatus(503, 'No Responders', '', 2000)).toEqual({ kind: 'remake' });
    expect(pullStatus(409, 'Consumer Deleted', '', 2000)).toEqual({ kind: 'remake' });
    expect(pullStatus(409, 'Consumer is Deleted', '', 2000)).toEqual({ kind: 'remake' });
    expect(pullStatus(409, 'Leadership Change', '', 2000)).toEqual({ kind: 'remake' });
    expect(pullStatus(400, 'Bad Request', '', 2000)).toEqual({
      kind: 'refused',
      description: 'Bad Request',
    });
    expect(pullStatus(409, 'Exceeded MaxRequestExpires of 10s', '', 2000)).toEqual({
      kind: 'refused',
      description: 'Exceeded MaxRequestExpires of 10s',
    });
    expect(pullStatus(409, 'Exceeded MaxRequestMaxBytes of 1024', '', 2000).kind).toBe('refused');
  });

  it('asks for fewer records when the server caps a pull below the batch, and not otherwise', () => {
    expect(pullStatus(409, 'Exceeded MaxRequestBatch of 500', '', 2000)).toEqual({
      kind: 'capped',
      batch: 500,
    });
    // A cap at or above what was asked for (or of 0) gives no smaller batch to ask for: asking
    // again would only be refused again.
    expect(pullStatus(409, 'Exceeded MaxRequestBatch of 2000', '', 2000).kind).toBe('refused');
    expect(pullStatus(409, 'Exceeded MaxRequestBatch of 0', '', 2000).kind).toBe('refused');
  });

  it('releases only the records the server says a pull did not deliver', () => {
    expect(pullStatus(408, 'Request Timeout', '37', 2000)).toEqual({ kind: 'ended', released: 37 });
    expect(pullStatus(404, 'No Messages', '5', 2000)).toEqual({ kind: 'ended', released: 5 });
    expect(pullStatus(408, 'Request Timeout', '', 2000)).toEqual({ kind: 'ended', released: 0 });
    expect(pullStatus(408, 'Request Timeout', '-3', 2000)).toEqual({ kind: 'ended', released: 0 });
    expect(pullStatus(409, 'Exceeded MaxWaiting', '12', 2000)).toEqual({
      kind: 'ended',
      released: 12,
    });
  });

  it('names the partition, the limits asked for and what to check when a pull is refused', () => {
    const e = pullRefused(eventLog(7), 'Exceeded MaxRequestExpires of 10s', 2000, 30_000);
    expect(e.code).toBe('VIGIL_E_NATS');
    expect(e.retryable).toBe(false);
    expect(e.message).toMatch(
      /partition 7: .*Exceeded MaxRequestExpires of 10s.*2000 records.*30000 ms.*max_request_expires/,
    );
  });
});

describe('RecordQueue', () => {
  const record = (seq: number): LogRecord => ({
    seq,
    subject: `events.k${seq}.0`,
    data: new Uint8Array(0),
    storedAt: seq,
    pending: 0,
  });

  it('hands records out oldest first, across the compaction of what was taken', () => {
    const q = new RecordQueue();
    let pushed = 0;
    let taken = 0;
    // Pushes outrun takes, so the head passes 1,024 with records still behind it.
    for (let round = 0; round < 50; round++) {
      for (let i = 0; i < 100; i++) q.push(record(++pushed));
      for (let i = 0; i < 60; i++) expect(q.take()?.seq).toBe(++taken);
      expect(q.size).toBe(pushed - taken);
    }
    while (q.size > 0) expect(q.take()?.seq).toBe(++taken);
    expect(taken).toBe(pushed);
    expect(q.take()).toBeUndefined();
  });

  it('is empty after clear', () => {
    const q = new RecordQueue();
    q.push(record(1));
    q.push(record(2));
    q.clear();
    expect(q.size).toBe(0);
    expect(q.take()).toBeUndefined();
    q.push(record(3));
    expect(q.take()?.seq).toBe(3);
  });
});
