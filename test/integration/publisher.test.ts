import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS, ensureStreams } from '../../service/index.js';
import { Streams, alertSubject, rekeySubject } from '../../protocol/index.js';
import { Publisher } from '../../service/output/publisher.js';
import { HopSender, inboxTransport } from '../../service/output/hop-sender.js';
import { startTestServers, type TestServers } from './servers.js';

// The publisher holds publishes to the next turn of the event loop, so that the alerts of many
// records share one socket write; what that must not change: order, acks awaited by settled(),
// and backpressure.

let servers: TestServers;

beforeAll(async () => {
  servers = await startTestServers({ partitions: 2 });
  await ensureStreams(servers.jsm, DEFAULT_OPTIONS.duplicateWindowMs, 2);
}, 60_000);

afterAll(async () => {
  await servers?.stop();
});

const subjectOf = (n: number): string => alertSubject('high', `pub-${n}`);

describe('Publisher', () => {
  it('sends the publishes of one turn together on the next, in order, and settled() waits for their acks', async () => {
    const publisher = new Publisher(servers.js, 1000);
    const before = servers.nc.stats().outMsgs;
    const handed = Array.from({ length: 200 }, (_, i) =>
      publisher.publish(subjectOf(1), JSON.stringify({ i }), { msgID: `t1-${i}` }),
    );
    // Handed over without a promise each, and nothing written yet in this turn.
    expect(handed.every((h) => h === undefined)).toBe(true);
    expect(servers.nc.stats().outMsgs).toBe(before);
    await publisher.settled();
    expect(servers.nc.stats().outMsgs - before).toBe(200);
    const info = await servers.jsm.streams.info(Streams.alerts, { subjects_filter: subjectOf(1) });
    expect(info.state.subjects?.[subjectOf(1)]).toBe(200);
    const got: number[] = [];
    const consumer = await servers.js.consumers.get(Streams.alerts, {
      filter_subjects: subjectOf(1),
    });
    const msgs = await consumer.fetch({ max_messages: 200, expires: 5000 });
    for await (const m of msgs) got.push((m.json() as { i: number }).i);
    expect(got).toEqual(Array.from({ length: 200 }, (_, i) => i));
  });

  it('asks the caller to wait once maxInFlight are unacknowledged, and lets it go when there is room', async () => {
    const publisher = new Publisher(servers.js, 3);
    expect(publisher.publish(subjectOf(2), 'a', { msgID: 't2-a' })).toBeUndefined();
    expect(publisher.publish(subjectOf(2), 'b', { msgID: 't2-b' })).toBeUndefined();
    const wait = publisher.publish(subjectOf(2), 'c', { msgID: 't2-c' });
    expect(wait).toBeInstanceOf(Promise);
    await wait;
    // Room again: at least one of the three is acknowledged.
    const info = await servers.jsm.streams.info(Streams.alerts, { subjects_filter: subjectOf(2) });
    expect(info.state.subjects?.[subjectOf(2)] ?? 0).toBeGreaterThanOrEqual(1);
    await publisher.flush();
    const after = await servers.jsm.streams.info(Streams.alerts, { subjects_filter: subjectOf(2) });
    expect(after.state.subjects?.[subjectOf(2)]).toBe(3);
  });
});

describe('HopSender on the inbox transport', () => {
  it('stores what it sends in order, answers each publish, and fails one no stream takes', async () => {
    const transport = inboxTransport(servers.nc, 500);
    const sender = new HopSender(transport, 50);
    for (let i = 1; i <= 300; i++) await sender.send(rekeySubject('card', i % 2), enc(String(i)));
    await sender.settled();
    expect(sender.pending).toBe(0);
    const info = await servers.jsm.streams.info(Streams.rekey);
    expect(info.state.messages).toBe(300);
    const got: number[] = [];
    const consumer = await servers.js.consumers.get(Streams.rekey);
    const it = await consumer.consume();
    for await (const m of it) {
      got.push(Number(m.string()));
      if (m.info.pending === 0) break;
    }
    await it.close();
    expect(got).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
    // No stream stores `nostream.x`: the answer (no responders, or none in time) is a failure.
    const err = await new Promise<Error | undefined>((resolve) =>
      transport.send('nostream.x', enc('1'), resolve),
    );
    expect(err).toBeInstanceOf(Error);
    transport.close();
  });
});

const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
