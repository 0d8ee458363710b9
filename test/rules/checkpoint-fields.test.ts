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
import type { SlidingState } from '../../rules/cep/threshold.js';
import {
  isSmallWindow,
  SMALL_WINDOW_MAX,
  WindowArena,
  type SmallWindow,
} from '../../rules/cep/small-window.js';
import { StateList } from '../../rules/keyed-states.js';
import { decodeKeyStatesText, encodeKeyStates } from '../../rules/key-state-json.js';
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
        for (const e of (JSON.parse(v) as unknown[]).slice(1) as unknown[][]) {
          entries++;
          if (typeof e[1] === 'number') refs++;
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

  it('a window is written as an earlier entry exactly when it would write the same text (random windows)', () => {
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
        t: r.t.map((x) => (Number.isFinite(x) ? 1000 + x : x)),
        v: r.v,
        sums: r.sums,
        f: r.f,
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
          if (c.v.length > 0) c.v.unshift(7);
          c.h++;
          c.f++;
        } else if (how === 'v') {
          if (c.v.length > 0) c.v[c.v.length - 1] = x;
          else c.v.push(x);
        } else if (how === 't') {
          if (c.t.length > 0) c.t[c.t.length - 1] = 1000 + x;
          else c.t.push(1000 + x);
        } else if (how === 'sums') c.sums = !c.sums;
        else if (how === 'f') c.f++;
        else if (how === 'mn') c.mn = c.mn.length > 0 ? [] : [c.h];
        else if (how === 'd') c.d = c.d === undefined ? new Map([['n:2', 1]]) : undefined;
        out.push(c);
      }
      return out;
    });
    fc.assert(
      fc.property(windows, (windows) => {
        const m = new StateList(windows.map((op, i) => [`r${i}@1`, undefined, op] as const));
        const index = new LineageIndex();
        const arena = new WindowArena();
        const text = encodeKeyStates(m, index, arena);
        const decoded = decodeKeyStatesText('k', text, arena, (n) => index.nameOf(n));
        // Each lineage alone (no entry to refer to): the same text before and after.
        const alone = (op: unknown) =>
          encodeKeyStates(new StateList([['x@1', undefined, op]]), index, arena);
        m.forEach((sid, _sup, op) => expect(alone(decoded.op(sid))).toBe(alone(op)));
      }),
      { numRuns: 500 },
    );
  });

  it('refuses a window that refers to an entry holding none, naming the key', () => {
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
