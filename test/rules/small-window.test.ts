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
import {
  SMALL_WINDOW_MAX,
  WindowArena,
  withSmallWindowMax,
  type SmallWindow,
} from '../../rules/cep/small-window.js';
import { expectWindowsOwned, memoryStore, ruleSetOf, upsert, writeParts } from './harness.js';

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
              expectWindowsOwned(st);
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
            expectWindowsOwned(st);
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

describe('the window arena', () => {
  it('keeps every live window intact through appends, evictions, moves between record sizes, copies and frees (random operations)', () => {
    const op = fc.oneof(
      fc.record({
        k: fc.constant('append' as const),
        slot: fc.nat(5),
        sums: fc.boolean(),
        value: fc.integer({ min: -50, max: 50 }),
        drop: fc.nat(8),
      }),
      fc.record({ k: fc.constant('free' as const), slot: fc.nat(5) }),
      fc.record({ k: fc.constant('copy' as const), slot: fc.nat(5), to: fc.nat(5) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const arena = new WindowArena();
        const held: (SmallWindow | undefined)[] = [];
        const model: ({ t: number[]; v: number[]; sums: boolean } | undefined)[] = [];
        let clock = 0;
        for (const o of ops) {
          const w = held[o.slot];
          const m = model[o.slot];
          if (o.k === 'append') {
            const sums = m?.sums ?? o.sums;
            const n0 = m?.t.length ?? 0;
            // Never the new entry, and never more than the bound held.
            const drop = Math.max(o.drop % (n0 + 1), n0 + 1 - SMALL_WINDOW_MAX);
            const t = [...(m?.t.slice(drop) ?? []), ++clock];
            const v = sums ? [...(m?.v.slice(drop) ?? []), o.value] : [];
            held[o.slot] = arena.append(w, sums, clock, o.value, drop);
            model[o.slot] = { t, v, sums };
          } else if (o.k === 'free') {
            if (w === undefined) continue;
            arena.free(w);
            held[o.slot] = model[o.slot] = undefined;
          } else {
            if (w === undefined || o.to === o.slot) continue;
            const old = held[o.to];
            if (old !== undefined) arena.free(old);
            held[o.to] = arena.copy(w);
            model[o.to] = m;
          }
          let live = 0;
          held.forEach((h, i) => {
            const x = model[i];
            if (h === undefined || x === undefined) return;
            live++;
            expect(arena.times(h)).toEqual(x.t);
            expect(arena.values(h)).toEqual(x.v);
            expect(arena.sums(h)).toBe(x.sums);
            expect(arena.size(h)).toBe(x.t.length);
            expect(arena.newest(h)).toBe(x.t[x.t.length - 1]);
            // Small integers: any order of addition gives the same sum.
            expect(arena.sum(h)).toBe(x.v.reduce((a, b) => a + b, 0));
          });
          expect(arena.live).toBe(live);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('grows its arrays without moving what they hold', () => {
    const arena = new WindowArena();
    const all: [SmallWindow, number][] = [];
    for (let i = 0; i < 5000; i++) {
      // Sizes 1 to 8, count and sum windows: every class grows many times.
      let w = arena.append(undefined, i % 2 === 0, i * 10, i, 0);
      for (let j = 1; j < (i % 8) + 1; j++) w = arena.append(w, i % 2 === 0, i * 10 + j, i, 0);
      all.push([w, i]);
    }
    for (const [w, i] of all) {
      expect(arena.size(w)).toBe((i % 8) + 1);
      expect(arena.time(w, 0)).toBe(i * 10);
      expect(arena.sum(w)).toBe(i % 2 === 0 ? i * ((i % 8) + 1) : 0);
    }
    expect(arena.live).toBe(5000);
  });

  it('refuses to free a window twice', () => {
    const arena = new WindowArena();
    const w = arena.append(undefined, false, 1, 0, 0);
    arena.free(w);
    expect(() => arena.free(w)).toThrow(/freed twice/);
  });
});
