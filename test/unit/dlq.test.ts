import { describe, expect, it } from 'vitest';
import { ApiError, replayReport } from '../../control-plane/index.js';
import * as letter from '../../control-plane/dlq-letter.js';
import type { DeadLetter } from '../../control-plane/dlq-letter.js';
import { letterLine } from '../../control-plane/cli-dlq.js';

const enc = (s: string) => new TextEncoder().encode(s);
const NOW = Date.parse('2026-12-01T12:00:00Z');

/** A dead letter as natsDeadLetterSink writes it. */
function stored(
  headers: Record<string, string>,
  data = enc('{"amount":5}'),
  subject = 'vigil.dlq.missing-type',
) {
  return letter.deadLetterOf({ seq: 7, subject, storedAt: NOW, headers, data });
}

const sinkHeaders = {
  'Nats-Msg-Id': 'dlq-41-missing-type',
  'Vigil-Reason': 'missing-type',
  'Vigil-Error': 'event has no "type"',
  'Vigil-Source-Stream': 'EVENTS',
  'Vigil-Source-Subject': 'events.k1.3',
  'Vigil-Source-Seq': '41',
};

function badRequest(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    expect((e as ApiError).status).toBe(400);
    return (e as ApiError).message;
  }
  throw new Error('expected a 400');
}

describe('dead letters: what a DLQ message says', () => {
  it("reads reason, error, source, rule and id from the sink's headers, and keeps only the producer's headers", () => {
    const l = stored({
      ...sinkHeaders,
      'Vigil-Rule': 'r1',
      'X-Trace': 'abc',
      'nats-expected-stream': 'E',
    });
    expect(l).toMatchObject({
      seq: 7,
      reason: 'missing-type',
      error: 'event has no "type"',
      source: { stream: 'EVENTS', subject: 'events.k1.3', seq: 41 },
      ruleId: 'r1',
      id: 'dlq-41-missing-type',
      size: 12,
    });
    expect(l.producerHeaders).toEqual({ 'X-Trace': 'abc' });
    // Without headers: the reason from the subject, and no source.
    const bare = stored({}, enc('x'), 'vigil.dlq.not-json');
    expect(bare.reason).toBe('not-json');
    expect(bare.source).toBeUndefined();
    expect(stored({ ...sinkHeaders, 'Vigil-Source-Seq': 'x' }).source).toBeUndefined();
  });

  it('previews a payload on one line, cut at 120 characters, and a payload that is not text by its size', () => {
    expect(letter.preview(enc('not json\r\n\tat all'))).toBe('not json at all');
    expect(letter.preview(enc(''))).toBe('');
    const long = 'é'.repeat(200);
    expect(letter.preview(enc(long))).toBe(`${'é'.repeat(119)}…`);
    // Only the start kept (a listing), cut inside a two-byte character: still text, and cut.
    const start = enc(long).slice(0, 9);
    expect(letter.preview(start, 400)).toBe('éééé…');
    expect(letter.preview(new Uint8Array([0xff, 0xfe, 0x00]))).toBe('<3 bytes, not text>');
    expect(letter.preview(new Uint8Array([0x61, 0xff, 0x62]), 500)).toBe('<500 bytes, not text>');
  });

  it('shows a letter with its payload as text, or base64 when asked or when it is not text', () => {
    const l = stored(sinkHeaders);
    const plain = letter.letterView(l, 'none');
    expect(plain).toEqual({
      seq: 7,
      time: '2026-12-01T12:00:00.000Z',
      reason: 'missing-type',
      error: 'event has no "type"',
      source: { stream: 'EVENTS', subject: 'events.k1.3', seq: 41 },
      id: 'dlq-41-missing-type',
      size: 12,
      preview: '{"amount":5}',
    });
    expect(letter.letterView(l, 'text')).toMatchObject({
      payload: '{"amount":5}',
      encoding: 'text',
    });
    expect(letter.letterView(l, 'base64')).toMatchObject({
      payload: Buffer.from('{"amount":5}').toString('base64'),
      encoding: 'base64',
    });
    const binary = stored(sinkHeaders, new Uint8Array([0xc3, 0x28]));
    expect(letter.letterView(binary, 'text')).toMatchObject({
      payload: 'wyg=',
      encoding: 'base64',
    });
  });

  it('replays only letters from EVENTS with one subject, each under an id of its DLQ sequence', () => {
    expect(letter.replayMsgId(12)).toBe('vigil-dlq-replay-12');
    expect(letter.replayMsgId(12)).not.toBe(letter.replayMsgId(13));
    expect(letter.replayTarget(stored(sinkHeaders))).toEqual({ ok: true, subject: 'events.k1.3' });
    const why = (h: Record<string, string>) => {
      const t = letter.replayTarget(stored(h));
      return t.ok ? '' : t.why;
    };
    expect(
      why({
        ...sinkHeaders,
        'Vigil-Source-Stream': 'CONTROL',
        'Vigil-Source-Subject': 'vigil.control',
      }),
    ).toMatch(/control message is not replayed/);
    expect(why({ ...sinkHeaders, 'Vigil-Source-Subject': 'events.*.3' })).toMatch(/reorder buffer/);
    expect(why({ 'Vigil-Reason': 'late' })).toMatch(/does not say where it came from/);
    expect(why({ ...sinkHeaders, 'Vigil-Source-Stream': 'ALERTS' })).toMatch(
      /only dead letters from EVENTS/,
    );
    // Records no replay can make valid, and Vigil's own records, never go back.
    for (const reason of [
      'wrong-partition',
      'reserved-key',
      'bad-subject',
      'bad-marker',
      'bad-tick',
      'forged-marker',
    ])
      expect(why({ ...sinkHeaders, 'Vigil-Reason': reason }), reason).toMatch(/is not replayed/);
    expect(why({ ...sinkHeaders, 'Vigil-Source-Subject': 'events._vigil.3' })).toMatch(
      /names no single subject/,
    );
  });
});

describe('dead letters: the report of a replay', () => {
  it('counts each outcome and lists the letters in DLQ order', () => {
    const r = replayReport(
      [
        { seq: 9, outcome: 'failed', error: 'x' },
        { seq: 3, outcome: 'replayed', eventsSeq: 40 },
        { seq: 5, outcome: 'duplicate', eventsSeq: 41 },
        { seq: 4, outcome: 'replayed', eventsSeq: 42 },
      ],
      false,
      true,
    );
    expect(r).toMatchObject({
      dryRun: false,
      selected: 4,
      replayed: 2,
      duplicates: 1,
      failed: 1,
      wouldReplay: 0,
      more: true,
    });
    expect(r.results.map((x) => x.seq)).toEqual([3, 4, 5, 9]);
    expect(replayReport([{ seq: 1, outcome: 'would-replay' }], true, false)).toMatchObject({
      dryRun: true,
      wouldReplay: 1,
      replayed: 0,
    });
  });
});

describe('dead letters: the query of a listing', () => {
  it('takes a bound as a sequence, a time or a duration before now', () => {
    expect(letter.parseBound('42', 'since', NOW)).toEqual({ kind: 'seq', seq: 42 });
    expect(letter.parseBound(42, 'since', NOW)).toEqual({ kind: 'seq', seq: 42 });
    expect(letter.parseBound('2026-12-01T10:00:00Z', 'since', NOW)).toEqual({
      kind: 'time',
      time: Date.parse('2026-12-01T10:00:00Z'),
    });
    expect(letter.parseBound('15m', 'since', NOW)).toEqual({ kind: 'time', time: NOW - 900_000 });
    expect(letter.parseBound('2d', 'since', NOW)).toEqual({
      kind: 'time',
      time: NOW - 172_800_000,
    });
    expect(letter.parseBound('90s', 'since', NOW)).toEqual({ kind: 'time', time: NOW - 90_000 });
    expect(letter.parseBound(undefined, 'since', NOW)).toBeUndefined();
    for (const bad of ['yesterday', '1w', '-3', 'June 1', -1, 1.5, true])
      expect(badRequest(() => letter.parseBound(bad, 'until', NOW))).toMatch(/^until must be/);
  });

  it('checks limit, payload, reason and wait, with the documented defaults', () => {
    expect(letter.parseListQuery({}, NOW)).toEqual({ limit: 100, payload: 'none', waitMs: 0 });
    expect(
      letter.parseListQuery(
        { reason: 'rule-error', rule: 'r1', after: '9', wait: '1000', limit: '0', payload: 'text' },
        NOW,
      ),
    ).toEqual({
      reason: 'rule-error',
      rule: 'r1',
      after: 9,
      waitMs: 1000,
      limit: 0,
      payload: 'text',
    });
    expect(badRequest(() => letter.parseListQuery({ limit: '1001' }, NOW))).toMatch(
      /limit must be an integer from 0 to 1000/,
    );
    expect(badRequest(() => letter.parseListQuery({ wait: '100' }, NOW))).toMatch(
      /wait needs after/,
    );
    expect(badRequest(() => letter.parseListQuery({ after: '1', wait: '30001' }, NOW))).toMatch(
      /wait/,
    );
    expect(badRequest(() => letter.parseListQuery({ payload: 'raw' }, NOW))).toMatch(/payload/);
    for (const reason of ['a.b', 'vigil.dlq.>', '*', 'x y'])
      expect(badRequest(() => letter.parseListQuery({ reason }, NOW))).toMatch(/reason/);
    expect(badRequest(() => letter.parseListQuery({ after: '-1' }, NOW))).toMatch(/after/);
  });
});

describe('vigil dlq tail', () => {
  it('prints one line per letter: sequence, time, reason, source, rule, error, payload', () => {
    const view = letter.letterView({ ...stored(sinkHeaders), ruleId: 'r1' } as DeadLetter, 'none');
    expect(letterLine(view)).toBe(
      '#7  2026-12-01 12:00:00Z  missing-type  events.k1.3#41  rule r1  event has no "type"  {"amount":5}',
    );
  });
});
