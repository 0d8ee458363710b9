import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  checkpointParts,
  createPartition,
  DEFAULT_LIMITS,
  processRecord,
  restorePartitionParts,
  snapshotPartition,
  type PartitionRecord,
  type ProcessResult,
  type Rule,
  type RuleSet,
} from '../../rules/index.js';
import { withSmallWindowMax } from '../../rules/cep/small-window.js';
import { memoryStore, ruleSetOf, upsert, writeParts } from './harness.js';

// Small windows (rules/cep/small-window.ts) must be indistinguishable from the mutable windows
// they stand for: the same alerts with the same values, the same snapshot text, the same
// checkpoints. Every run here is compared with one where every window is mutable (bound 0).

/** Values whose sums depend on the order they are added in. */
const amount = fc.constantFrom(0.1, 0.2, 0.3, 1e16, -1e16, 1, 2.5, 7);

const rule = (
  id: string,
  aggregate: 'count' | 'sum' | 'avg',
  window: number,
  extra: Partial<Rule> = {},
): Rule => ({
  id,
  on: ['pay'],
  pattern: {
    kind: 'threshold',
    aggregate,
    ...(aggregate === 'count' ? {} : { field: 'amount' }),
    window,
    operator: '>=',
    value: aggregate === 'count' ? 3 : aggregate === 'sum' ? 0.6 : 0.2,
  },
  ...extra,
});

/** Rules that see the same events (so their windows are shared) and some that do not. */
const rules: RuleSet = ruleSetOf(
  upsert(rule('c-short', 'count', 20)),
  upsert(rule('c-long', 'count', 60)),
  upsert(rule('s-short', 'sum', 20)),
  upsert(rule('s-long', 'sum', 60)),
  upsert(rule('s-same', 'sum', 60, { alert: { suppressFor: 15 } })),
  upsert(rule('a-mid', 'avg', 40)),
  upsert(
    rule('s-big', 'sum', 40, {
      when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 0.5 }] },
    }),
  ),
  upsert(
    rule('c-other-key', 'count', 30, {
      key: 'card',
      when: { all: [{ fact: 'amount', operator: 'lessThan', value: 2 }] },
    }),
  ),
);

const step = fc.record({
  key: fc.constantFrom('k1', 'k2', 'k3'),
  card: fc.constantFrom('c1', 'c2'),
  dt: fc.integer({ min: 0, max: 12 }),
  back: fc.integer({ min: 0, max: 6 }),
  amount,
});

type Step = typeof step extends fc.Arbitrary<infer S> ? S : never;

function records(steps: Step[]): PartitionRecord[] {
  let now = 1000;
  return steps.map((s, i) => {
    now += s.dt;
    // Some events a little behind the newest one: the reorder buffer puts them in order.
    const ts = now - s.back;
    return {
      kind: 'event',
      seq: i + 1,
      key: s.key,
      data: JSON.stringify({ type: 'pay', card: s.card, amount: s.amount, ts }),
      publishTs: now,
    };
  });
}

const outputs = (rs: ProcessResult[]): string =>
  JSON.stringify(rs.map((r) => [r.alerts, r.overflows, r.suppressed, r.late.length]));

describe('small windows', () => {
  it('give the same alerts, values, overflows and snapshots as mutable windows (random streams, size limits, cuts through checkpoints)', () => {
    let alerts = 0;
    let overflows = 0;
    fc.assert(
      fc.property(
        fc.array(step, { minLength: 1, maxLength: 120 }),
        fc.constantFrom(2, 5, 100_000),
        fc.constantFrom(0, 1, 2, 8),
        fc.constantFrom(0, 1, 8),
        fc.nat(),
        (steps, maxEntries, boundA, boundB, cutAt) => {
          const recs = records(steps);
          const options = {
            partition: 1,
            outOfOrderMs: 6,
            limits: { ...DEFAULT_LIMITS, maxWindowEntriesPerKey: maxEntries },
          };
          const run = (bound: number) =>
            withSmallWindowMax(bound, () => {
              const st = createPartition(rules, options);
              const out = recs.map((r) => processRecord(st, r));
              return { out: outputs(out), snapshot: snapshotPartition(st), results: out };
            });
          const mutable = run(0);
          const a = run(boundA);
          expect(a.out).toBe(mutable.out);
          expect(a.snapshot).toEqual(mutable.snapshot);
          alerts += mutable.results.flatMap((r) => r.alerts).length;
          overflows += mutable.results.flatMap((r) => r.overflows).length;

          // Checkpointed under one bound, restored and continued under another.
          const cut = cutAt % (recs.length + 1);
          const store = memoryStore();
          const before = withSmallWindowMax(boundA, () => {
            const st = createPartition(rules, options);
            const out = recs.slice(0, cut).map((r) => processRecord(st, r));
            writeParts(store, checkpointParts(st, true));
            return out;
          });
          const after = withSmallWindowMax(boundB, () => {
            const st = restorePartitionParts(store, () => rules, options);
            const out = recs.slice(cut).map((r) => processRecord(st, r));
            return { out, snapshot: snapshotPartition(st) };
          });
          expect(outputs([...before, ...after.out])).toBe(mutable.out);
          expect(after.snapshot).toEqual(mutable.snapshot);
        },
      ),
      { numRuns: 300 },
    );
    // The runs must exercise alerts and the size limit.
    expect(alerts).toBeGreaterThan(500);
    expect(overflows).toBeGreaterThan(50);
  });
});
