import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  applyControl,
  checkpointParts,
  createPartition,
  emptyRuleSet,
  keyedStateCount,
  processRecord,
  restorePartitionParts,
  snapshotPartition,
  type PartitionRecord,
  type PartitionState,
  type ProcessResult,
} from '../../rules/index.js';
import { slidingWindow, type SlidingState } from '../../rules/cep/threshold.js';
import {
  isSmallWindow,
  SMALL_WINDOW_MAX,
  WindowArena,
  type SmallWindow,
} from '../../rules/cep/small-window.js';
import { StateList } from '../../rules/keyed-states.js';
import { decodeKeyStatesText } from '../../rules/key-state-json.js';
import {
  decodeField,
  encodeField,
  fieldEntries,
  fieldExpiry,
  fieldMayHold,
} from '../../rules/checkpoint-field.js';
import { LineageIndex } from '../../rules/lineage-index.js';
import { eventGenerator, generateRules } from '../../bench/e2e-inputs.js';
import { keyStates, memoryStore, writeParts } from './harness.js';

const decoder = new TextDecoder();

describe('checkpoint fields: equal windows written once', () => {
  it('a key whose rules met the same events writes each window once, and restores mutable windows as copies of their own', () => {
    const applied = applyControl(
      emptyRuleSet(),
      { op: 'replace-all', rules: generateRules(200, 3) },
      1,
    );
    if (!applied.ok) throw new Error('rules rejected');
    const rs = applied.ruleSet;
    const next = eventGenerator(3, 40);
    const records: PartitionRecord[] = Array.from({ length: 3000 }, (_, i) => {
      const { key, data } = next(i);
      return { kind: 'event', seq: i + 1, key, data, publishTs: 1_000_000 + i * 7 };
    });
    const options = { partition: 0, outOfOrderMs: 100 };
    const whole = createPartition(rs, options);
    const expected = records.map((r) => processRecord(whole, r));
    const store = memoryStore();
    const live = createPartition(rs, options);
    const before: ProcessResult[] = [];
    let refs = 0;
    let entries = 0;
    for (const r of records.slice(0, 2000)) {
      before.push(processRecord(live, r));
      if (r.seq % 97 !== 0) continue;
      const parts = checkpointParts(live);
      for (const [, v] of parts.upserts)
        for (const e of fieldEntries(v)) {
          entries++;
          if (e.kind === 'ref') refs++;
        }
      writeParts(store, parts);
    }
    // Many windows of a key are the same as another lineage's.
    expect(refs / entries).toBeGreaterThan(0.15);
    const restored = restorePartitionParts(store, () => rs, options);
    const from = records.findIndex((r) => r.seq > restored.offset);
    const after = records.slice(from).map((r) => processRecord(restored, r));
    const alerts = (rs: ProcessResult[]) => rs.flatMap((r) => r.alerts.map((a) => a.id));
    expect(alerts([...before.slice(0, from), ...after])).toEqual(alerts(expected));
    expect(alerts(expected).length).toBeGreaterThan(0);
    expect(decoder.decode(snapshotPartition(restored))).toBe(
      decoder.decode(snapshotPartition(whole)),
    );
    // Each restored window is its own: no array is shared between two lineages' windows (small
    // windows are records of their own in the partition's arena).
    const restoredAgain = restorePartitionParts(store, () => rs, options);
    expect(keyedStateCount(restoredAgain)).toBeGreaterThan(0);
    expectNoSharedArrays(restoredAgain);
  });

  it('a window is written as an earlier entry exactly when it would write the same field (random windows)', () => {
    // Few distinct values, so that equal and nearly equal windows are common.
    const small = fc.constantFrom(0, 1, 2, 0.5, -0, Infinity);
    const window: fc.Arbitrary<SlidingState> = fc
      .record({
        t: fc.array(small, { maxLength: 3 }),
        v: fc.array(fc.oneof(small, fc.constant('x')), { maxLength: 3 }),
        sums: fc.boolean(),
        h: fc.nat(2),
        f: fc.nat(3),
        mn: fc.array(fc.nat(3), { maxLength: 1 }),
        d: fc.boolean(),
      })
      .map((r) => ({
        k: 's' as const,
        h: Math.min(r.h, r.t.length),
        // The front end of the two stacks lies within the window's entries.
        t: r.t.map((x) => (Number.isFinite(x) ? 1000 + x : x)),
        // A value per entry where the window keeps values (sums, or min/max deques), as windows do.
        v: withValues(r.sums, r.mn, r.t, r.v),
        sums: r.sums,
        f: Math.min(r.f, r.t.length),
        fs: [],
        fs0: 0,
        bs: 0,
        mn: r.mn,
        mx: [],
        d: r.d ? new Map([['n:1', 1]]) : undefined,
      }));
    // Windows made from earlier ones by one change or none: nearly equal windows are the point.
    const change = fc.tuple(
      fc.nat(),
      fc.constantFrom('same', 'shift', 'v', 't', 'sums', 'f', 'mn', 'd'),
      small,
    );
    const windows = fc.tuple(window, fc.array(change, { maxLength: 6 })).map(([first, changes]) => {
      const out: SlidingState[] = [first];
      for (const [from, how, x] of changes) {
        const w = out[from % out.length] as SlidingState;
        const c: SlidingState = { ...w, t: [...w.t], v: [...w.v], mn: [...w.mn] };
        if (how === 'shift') {
          // The same window with an evicted entry left at its head: the same text.
          c.t.unshift(999);
          if (c.sums || c.mn.length > 0) c.v.unshift(7);
          c.h++;
          c.f++;
        } else if (how === 'v') {
          if (c.v.length > 0) c.v[c.v.length - 1] = x;
        } else if (how === 't') {
          if (c.t.length > 0) c.t[c.t.length - 1] = 1000 + x;
          else {
            c.t.push(1000 + x);
            if (c.sums || c.mn.length > 0) c.v.push(x);
          }
        } else if (how === 'sums') {
          c.sums = !c.sums;
          c.v = withValues(c.sums, c.mn, c.t, c.v);
        } else if (how === 'f') c.f = c.f < c.t.length ? c.f + 1 : 0;
        else if (how === 'mn') {
          c.mn = c.mn.length > 0 ? [] : [c.h];
          c.v = withValues(c.sums, c.mn, c.t, c.v);
        } else if (how === 'd') c.d = c.d === undefined ? new Map([['n:2', 1]]) : undefined;
        out.push(c);
      }
      return out;
    });
    fc.assert(
      fc.property(windows, (windows) => {
        const m = new StateList(windows.map((op, i) => [`r${i}@1`, undefined, op] as const));
        const index = new LineageIndex();
        const arena = new WindowArena();
        const text = encodeField(m, index, arena);
        const decoded = decodeField('k', text, arena, (n) => index.nameOf(n));
        // Each lineage alone (no entry to refer to): the same field before and after.
        const alone = (op: unknown) =>
          encodeField(new StateList([['x@1', undefined, op]]), index, arena);
        m.forEach((sid, _sup, op) => expect(alone(decoded.op(sid))).toBe(alone(op)));
      }),
      { numRuns: 500 },
    );
  });

  it('a v7 field gives back every number to the bit (-0, fractions, non-finite, far apart), its expiry bucket and its lineages (random states)', () => {
    const anyNumber = fc.oneof(
      fc.double(),
      fc.integer({ min: -(2 ** 53) + 1, max: 2 ** 53 - 1 }),
      fc.integer({ min: -3, max: 3 }),
      fc.constantFrom(0, -0, 2 ** 51, -(2 ** 51), 2 ** 51 + 1, 1.5e12, NaN, Infinity),
    );
    const state = fc.record({
      t: fc.array(anyNumber, { maxLength: 12 }),
      v: fc.array(anyNumber, { minLength: 12, maxLength: 12 }),
      sums: fc.boolean(),
      f: fc.nat(12),
      sup: fc.option(anyNumber, { nil: undefined }),
      kind: fc.constantFrom('window', 'none', 'tumbling'),
    });
    const sameBits = (a: unknown, b: unknown) =>
      expect(JSON.stringify(a, bits)).toBe(JSON.stringify(b, bits));
    fc.assert(
      fc.property(
        fc.array(state, { minLength: 1, maxLength: 6 }),
        fc.option(fc.integer({ min: -(2 ** 53) + 1, max: 2 ** 53 - 1 }), { nil: undefined }),
        (states, exp) => {
          const arena = new WindowArena();
          const list = new StateList();
          list.exp = exp;
          states.forEach((x, i) => {
            const v = x.sums ? x.v.slice(0, x.t.length) : [];
            const op =
              x.kind === 'none'
                ? undefined
                : x.kind === 'tumbling'
                  ? { k: 't', start: 60_000, n: x.t.length, sum: x.v[0], min: x.v[1], max: x.v[2] }
                  : slidingWindow(x.t.slice(), v, x.sums, Math.min(x.f, x.t.length));
            list.add(`r${i}@1`, x.sup, op);
          });
          const index = new LineageIndex();
          const text = encodeField(list, index, arena);
          // Printable ASCII only: one byte a symbol in any store, no escape in JSON.
          expect(text).toMatch(/^[\x20-\x7e]*$/);
          const back = decodeField('k', text, arena, (n) => index.nameOf(n));
          expect(back.exp).toBe(exp);
          expect(fieldExpiry(text)).toBe(exp);
          expect(back.sids).toEqual(list.sids);
          sameBits(back.sups, list.sups);
          list.forEach((sid, _sup, op) => {
            const got = back.op(sid);
            if (isSmallWindow(got)) {
              const w = op as SlidingState;
              sameBits(arena.times(got), w.t);
              sameBits(arena.values(got), w.sums ? w.v : []);
              expect(arena.front(got)).toBe(w.f);
            } else if ((op as SlidingState | undefined)?.k === 's') {
              const [w, g] = [op as SlidingState, got as SlidingState];
              sameBits(
                [g.t, g.sums ? g.v : [], g.f, g.sums],
                [w.t, w.sums ? w.v : [], w.f, w.sums],
              );
            } else sameBits(got, op);
          });
          const entries = fieldEntries(text);
          expect(entries.map((e) => index.nameOf(e.lineage))).toEqual(list.sids);
          for (const sid of list.sids)
            expect(fieldMayHold(text, sid, index.numberIfAny(sid))).toBe(true);
          expect(fieldMayHold(text, 'other@1', index.numberOf('other@1'))).toBe(false);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('refuses a text field (v2 to v6) whose window refers to an entry holding none, naming the key', () => {
    const arena = new WindowArena();
    expect(() => decodeKeyStatesText('k1', '[0,["a@1",null,1]]', arena)).toThrow(
      /"k1": lineage a@1 refers to entry 1/,
    );
    expect(() =>
      decodeKeyStatesText('k2', '[0,["a@1",null,{"k":"q","pm":[]}],["b@1",null,1]]', arena),
    ).toThrow(/"k2": lineage b@1 refers to entry 1, which holds no window/);
    expect(() =>
      decodeKeyStatesText('k3', '[0,["a@1",null,{"k":"s","t":[0]}],["b@1",null,1.5]]', arena),
    ).toThrow(/refers to entry 1.5/);
    expect(() =>
      decodeKeyStatesText('k7', '[0,["a@1",null,{"k":"s","t":[0]}],["a@1",null,1]]', arena),
    ).toThrow(/"k7" holds lineage a@1 twice/);
    // A refused field leaves no window behind.
    expect(arena.live).toBe(0);
    // No operator writes a list: refused, not misread.
    expect(() => decodeKeyStatesText('k6', '[0,["a@1",null,[1,0,1,7,"x"]]]', arena)).toThrow(
      /"k6": lineage a@1 holds a list where an operator state belongs/,
    );
    // The entry that refers to a small window holds a record of its own with the same entries.
    const ok = decodeKeyStatesText(
      'k4',
      '[10,["a@1",null,{"k":"s","t":[0,2]}],["b@1",5,1]]',
      arena,
    );
    const [a, b] = ok.ops as SmallWindow[];
    expect(isSmallWindow(b)).toBe(true);
    expect(arena.times(b as SmallWindow)).toEqual([10, 12]);
    expect(b).not.toBe(a);
    expect(arena.live).toBe(2);
    expect(ok.sup('b@1')).toBe(5);
    // A larger window is mutable: a copy of its own.
    const t = Array.from({ length: SMALL_WINDOW_MAX + 1 }, (_, i) => i);
    const big = decodeKeyStatesText(
      'k5',
      `[10,["a@1",null,{"k":"s","t":${JSON.stringify(t)}}],["b@1",null,1]]`,
      arena,
    );
    const [c, d] = big.ops as SlidingState[];
    expect(d?.k).toBe('s');
    expect(d?.t).toEqual(t.map((x) => x + 10));
    expect(d?.t).not.toBe(c?.t);
  });
});

/** JSON.stringify's replacer that writes every number to the bit (-0, NaN, ±Infinity apart). */
function bits(_key: string, x: unknown): unknown {
  return typeof x === 'number' ? (Object.is(x, -0) ? '-0' : String(x)) : x;
}

/** A window's values: one per entry where it keeps them (a sum window, or min/max deques), else none. */
function withValues(
  sums: boolean,
  mn: readonly number[],
  t: readonly unknown[],
  v: readonly unknown[],
): unknown[] {
  return sums || mn.length > 0 ? t.map((_, i) => v[i] ?? 0) : [];
}

function expectNoSharedArrays(st: PartitionState): void {
  for (const key of st.states.keys()) {
    const seen = new Set<unknown>();
    for (const v of keyStates(st, key).ops) {
      const s = v as SlidingState | undefined;
      if (s?.k !== 's') continue;
      for (const a of [s.t, s.v, s.fs]) {
        if (a.length === 0) continue;
        expect(seen.has(a)).toBe(false);
        seen.add(a);
      }
    }
  }
}
