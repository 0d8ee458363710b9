import { describe, expect, it } from 'vitest';
import { Feed, ruleSetOf, upsert } from './harness.js';

const seqRule = (contiguity: 'next' | 'followedBy', extra: Record<string, unknown> = {}) =>
  upsert({
    id: 'login-then-pay',
    on: ['login', 'payment', 'browse'],
    pattern: {
      kind: 'sequence',
      within: 1000,
      steps: [
        { name: 'login', on: ['login'] },
        { name: 'pay', on: ['payment'], contiguity },
      ],
      ...extra,
    },
  } as never);

describe('sequence', () => {
  it('relaxed contiguity (followedBy) skips unrelated events in between', () => {
    const f = new Feed(ruleSetOf(seqRule('followedBy')));
    f.event({ type: 'login', ts: 100 });
    f.event({ type: 'browse', ts: 110 });
    f.event({ type: 'payment', ts: 120 });
    f.tick(10_000);
    expect(f.fired).toEqual(['login-then-pay@120']);
    expect(f.alerts[0]?.events.map((e) => e.seq)).toEqual([1, 3]);
  });

  it('strict contiguity (next) needs the very next event the rule sees', () => {
    const f = new Feed(ruleSetOf(seqRule('next')));
    f.event({ type: 'login', ts: 100 });
    f.event({ type: 'browse', ts: 110 });
    f.event({ type: 'payment', ts: 120 });
    f.event({ type: 'login', ts: 200 });
    f.event({ type: 'payment', ts: 210 });
    f.tick(10_000);
    expect(f.fired).toEqual(['login-then-pay@210']);
  });

  it('strict contiguity ignores events the rule does not see (other types, failed `when`)', () => {
    const f = new Feed(ruleSetOf(seqRule('next')));
    f.event({ type: 'login', ts: 100 });
    f.event({ type: 'logout', ts: 110 });
    f.event({ type: 'payment', ts: 120 });
    f.tick(10_000);
    expect(f.fired).toEqual(['login-then-pay@120']);
  });

  it('within is half-open: an event exactly at start + within does not match', () => {
    const f = new Feed(ruleSetOf(seqRule('followedBy')));
    f.event({ type: 'login', ts: 1000 });
    f.event({ type: 'payment', ts: 2000 });
    f.event({ type: 'login', ts: 3000 });
    f.event({ type: 'payment', ts: 3999 });
    f.tick(10_000);
    expect(f.fired).toEqual(['login-then-pay@3999']);
  });

  it('times(n) needs n events of a step, and a later step can refer to an earlier step', () => {
    const f = new Feed(
      ruleSetOf(
        upsert({
          id: 'small-then-big',
          on: ['payment'],
          pattern: {
            kind: 'sequence',
            within: '1m',
            steps: [
              {
                name: 'small',
                when: { all: [{ fact: 'amount', operator: 'lessThan', value: 5 }] },
                times: 3,
              },
              {
                name: 'big',
                when: {
                  all: [
                    {
                      fact: 'amount',
                      operator: 'greaterThan',
                      value: { fact: 'step:small', path: '$.limit' },
                    },
                  ],
                },
              },
            ],
          },
        }),
      ),
    );
    f.event({ type: 'payment', amount: 1, limit: 100, ts: 1 });
    f.event({ type: 'payment', amount: 2, limit: 100, ts: 2 });
    f.event({ type: 'payment', amount: 150, ts: 3 }); // only two small ones so far: no match
    f.event({ type: 'payment', amount: 3, limit: 500, ts: 4 });
    f.event({ type: 'payment', amount: 400, ts: 5 }); // step:small is the last small event: limit 500
    f.event({ type: 'payment', amount: 600, ts: 6 });
    f.tick(1_000_000);
    expect(f.fired).toEqual(['small-then-big@6']);
    expect(f.alerts[0]?.events.map((e) => e.ts)).toEqual([1, 2, 4, 6]);
  });

  it('after a match, skip-past-last-event discards the other partial matches; no-skip keeps them', () => {
    const events = [
      { type: 'login', ts: 1 },
      { type: 'login', ts: 2 },
      { type: 'payment', ts: 3 },
      { type: 'payment', ts: 4 },
    ];
    const skip = new Feed(ruleSetOf(seqRule('followedBy')));
    events.forEach((e) => skip.event(e));
    skip.tick(10_000);
    expect(skip.fired).toEqual(['login-then-pay@3']);
    const noSkip = new Feed(ruleSetOf(seqRule('followedBy', { afterMatch: 'no-skip' })));
    events.forEach((e) => noSkip.event(e));
    noSkip.tick(10_000);
    expect(noSkip.fired).toEqual(['login-then-pay@3', 'login-then-pay@3']);
    expect(noSkip.alerts.map((a) => a.events.map((e) => e.ts))).toEqual([
      [1, 3],
      [2, 3],
    ]);
  });
});

describe('absence', () => {
  const rs = ruleSetOf(
    upsert({
      id: 'no-confirm',
      on: ['order'],
      key: 'orderId',
      pattern: { kind: 'absence', within: 500, expect: { on: ['confirm'] } },
      alert: { title: 'order {{orderId}} not confirmed' },
    }),
  );

  it('fires exactly at A.ts + T on the watermark alone (a tick, no further event)', () => {
    const f = new Feed(rs);
    f.event({ type: 'order', orderId: 'o1', ts: 1000 });
    expect(f.tick(1500).alerts).toEqual([]); // watermark 1499: not yet
    const r = f.tick(1501); // watermark 1500
    expect(r.alerts.map((a) => [a.ts, a.title, a.key])).toEqual([
      [1500, 'order o1 not confirmed', 'o1'],
    ]);
  });

  it('is cancelled by the expected event before the deadline, not at it', () => {
    const f = new Feed(rs);
    f.event({ type: 'order', orderId: 'o1', ts: 1000 });
    f.event({ type: 'confirm', orderId: 'o1', ts: 1499 });
    f.event({ type: 'order', orderId: 'o2', ts: 2000 });
    f.event({ type: 'confirm', orderId: 'o2', ts: 2500 });
    f.tick(5000);
    expect(f.fired).toEqual(['no-confirm@2500']);
    expect(f.alerts[0]?.key).toBe('o2');
  });
});

describe('threshold', () => {
  it('a sliding sum drops events that leave the window [t − size, t]', () => {
    const f = new Feed(
      ruleSetOf(
        upsert({
          id: 'big-spend',
          on: ['payment'],
          pattern: {
            kind: 'threshold',
            aggregate: 'sum',
            field: 'amount',
            window: 1000,
            operator: '>=',
            value: 100,
          },
        }),
      ),
    );
    f.event({ type: 'payment', amount: 60, ts: 0 });
    f.event({ type: 'payment', amount: 40, ts: 1000 }); // window [0, 1000]: 100
    f.event({ type: 'payment', amount: 30, ts: 1001 }); // window [1, 1001]: 70
    f.event({ type: 'payment', amount: 30, ts: 1500 }); // window [500, 1500]: 100
    f.tick(10_000);
    expect(f.alerts.map((a) => [a.ts, a.values.sum])).toEqual([
      [1000, 100],
      [1500, 100],
    ]);
  });

  it('min, max, avg and distinct are kept incrementally over the window', () => {
    const agg = (aggregate: string, operator: string, value: number) =>
      upsert({
        id: `r-${aggregate}`,
        on: ['p'],
        pattern: { kind: 'threshold', aggregate, field: 'v', window: 10, operator, value },
      } as never);
    const f = new Feed(
      ruleSetOf(
        agg('min', '>=', 5),
        agg('max', '<=', 5),
        agg('avg', '==', 5),
        agg('distinct', '>=', 2),
      ),
    );
    for (const [ts, v] of [
      [0, 9],
      [5, 5],
      [11, 1],
      [12, 5],
      [16, 5],
      [30, 7],
    ] as const)
      f.event({ type: 'p', v, ts });
    f.tick(1000);
    const by = (id: string) => f.alerts.filter((a) => a.ruleId === id).map((a) => a.ts);
    expect(by('r-min')).toEqual([0, 5, 30]);
    expect(by('r-max')).toEqual([11, 12, 16]);
    expect(by('r-avg')).toEqual([]);
    expect(by('r-distinct')).toEqual([5, 11, 12, 16]);
  });

  it('a tumbling window is judged once, when the watermark closes it', () => {
    const f = new Feed(
      ruleSetOf(
        upsert({
          id: 'burst',
          on: ['login'],
          pattern: {
            kind: 'threshold',
            aggregate: 'count',
            window: 1000,
            windowType: 'tumbling',
            operator: '>=',
            value: 3,
          },
        }),
      ),
    );
    for (const ts of [100, 200, 300, 999]) f.event({ type: 'login', ts });
    expect(f.alerts).toEqual([]);
    f.event({ type: 'login', ts: 1000 }); // watermark 999: window [0, 1000) closes
    expect(
      f.alerts.map((a) => [a.ts, a.values.count, a.values.windowStart, a.values.windowEnd]),
    ).toEqual([[999, 4, 0, 1000]]);
    f.event({ type: 'login', ts: 1500 });
    f.tick(5000);
    expect(f.alerts).toHaveLength(1); // [1000, 2000) held two events
  });

  it('a non-numeric field is reported as a rule error, not silently skipped', () => {
    const f = new Feed(
      ruleSetOf(
        upsert({
          id: 's',
          on: ['p'],
          pattern: {
            kind: 'threshold',
            aggregate: 'sum',
            field: 'amount',
            window: 10,
            operator: '>',
            value: 0,
          },
        }),
      ),
    );
    f.event({ type: 'p', amount: 'ten', ts: 1 });
    const r = f.tick(100);
    expect(r.errors.map((e) => [e.ruleId, e.seq, e.error.code])).toEqual([
      ['s', 1, 'VIGIL_E_RULE_EVALUATION'],
    ]);
  });
});

describe('watermarks', () => {
  const count = ruleSetOf(
    upsert({
      id: 'seq',
      on: ['e'],
      pattern: {
        kind: 'sequence',
        within: 1000,
        steps: [
          { name: 'a', when: { all: [{ fact: 'n', operator: 'equal', value: 1 }] } },
          {
            name: 'b',
            contiguity: 'next',
            when: { all: [{ fact: 'n', operator: 'equal', value: 2 }] },
          },
        ],
      },
    }),
  );

  it('reorders out-of-order events inside the bound into event-time order', () => {
    const f = new Feed(count, 100);
    f.event({ type: 'e', n: 2, ts: 1050 }); // arrives first, happened second
    f.event({ type: 'e', n: 1, ts: 1000 });
    f.tick(2000);
    expect(f.fired).toEqual(['seq@1050']);
  });

  it('reports an event at or before the watermark as late, and does not judge it', () => {
    const f = new Feed(count, 100);
    f.event({ type: 'e', n: 1, ts: 1000 });
    f.event({ type: 'e', n: 1, ts: 1300 }); // watermark 1199
    const late = f.event({ type: 'e', n: 2, ts: 1199 });
    expect(late.late).toEqual([{ seq: 3, ts: 1199, watermark: 1199 }]);
    f.tick(5000);
    expect(f.fired).toEqual([]);
  });

  it('an event just after the watermark still takes its place in event-time order', () => {
    const f = new Feed(count, 100);
    f.event({ type: 'e', n: 1, ts: 1000 });
    f.event({ type: 'e', n: 1, ts: 1300 }); // watermark 1199
    expect(f.event({ type: 'e', n: 2, ts: 1200 }).late).toEqual([]);
    f.tick(5000);
    // In event time the 2 at 1200 comes right after the 1 at 1000: a strict match.
    expect(f.fired).toEqual(['seq@1200']);
  });

  it('events with the same timestamp are not late with zero out-of-orderness', () => {
    const f = new Feed(count, 0);
    f.event({ type: 'e', n: 1, ts: 1000 });
    expect(f.event({ type: 'e', n: 2, ts: 1000 }).late).toEqual([]);
    f.tick(1001);
    expect(f.fired).toEqual(['seq@1000']);
  });
});
