import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KeyedStates } from '../../rules/keyed-states.js';
import { lineageNumber } from '../../rules/lineage-number.js';

type Model = Map<string, Map<string, [number | undefined, unknown]>>;

/** Everything the table holds, in its own order: keys, then each key's lineages. */
function contents(t: KeyedStates): [string, [string, number | undefined, unknown][]][] {
  return [...t.keys()].map((key) => {
    const list: [string, number | undefined, unknown][] = [];
    t.statesOf(t.keyNumber(key)).forEach((sid, sup, op) => list.push([sid, sup, op]));
    return [key, list];
  });
}

const modelContents = (m: Model) =>
  [...m].map(([key, byLineage]) => [key, [...byLineage].map(([sid, [sup, op]]) => [sid, sup, op])]);

describe('keyed states', () => {
  it('answers as a map of keys to maps of lineages does, in the same orders, through growth, deletes and reused numbers (random operations)', () => {
    const op = fc.record({
      k: fc.constantFrom('put', 'put', 'put', 'delete', 'delete-key', 'exp'),
      key: fc.integer({ min: 0, max: 40 }),
      lin: fc.integer({ min: 0, max: 12 }),
      sup: fc.option(fc.integer({ min: 0, max: 99 }), { nil: undefined }),
      op: fc.oneof(fc.nat(1000), fc.constant({ k: 's' }), fc.constant(undefined)),
    });
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
        const t = new KeyedStates();
        const m: Model = new Map();
        const exps = new Map<string, number>();
        for (const o of ops) {
          const key = `key-${o.key}`;
          const sid = `rule-${o.lin}@1`;
          const lin = lineageNumber(sid);
          let k = t.keyNumber(key);
          const s = k < 0 ? -1 : t.find(k, lin);
          if (o.k === 'put') {
            if (s >= 0) t.set(s, o.sup, o.op);
            else {
              if (k < 0) k = t.addKey(key);
              t.add(k, lin, o.sup, o.op);
            }
            const byLineage = m.get(key) ?? new Map();
            byLineage.set(sid, [o.sup, o.op]);
            m.set(key, byLineage);
          } else if (o.k === 'delete') {
            if (s < 0) continue;
            const last = t.delete(k, s);
            const byLineage = m.get(key) as Map<string, unknown>;
            byLineage.delete(sid);
            expect(last).toBe(byLineage.size === 0);
            if (last) {
              m.delete(key);
              exps.delete(key);
            }
          } else if (o.k === 'delete-key') {
            if (k < 0) continue;
            while (t.stateCount(k) > 0 && !t.delete(k, t.first(k)));
            m.delete(key);
            exps.delete(key);
          } else if (k >= 0) {
            t.setExp(k, o.key * 10);
            exps.set(key, o.key * 10);
          }
          expect(contents(t)).toEqual(modelContents(m));
          expect(t.size).toBe(m.size);
          let n = 0;
          for (const [key, byLineage] of m) {
            n += byLineage.size;
            const kk = t.keyNumber(key);
            expect(t.stateCount(kk)).toBe(byLineage.size);
            expect(t.exp(kk)).toBe(exps.get(key));
            for (const [sid, [sup, op]] of byLineage) {
              const x = t.find(kk, lineageNumber(sid));
              expect(t.sid(x)).toBe(sid);
              expect(t.sup(x)).toBe(sup);
              expect(t.op(x)).toBe(op);
            }
          }
          expect(t.states).toBe(n);
        }
      }),
      { numRuns: 200 },
    );
  });

  it('holds many keys and lineages', () => {
    const t = new KeyedStates();
    for (let i = 0; i < 20_000; i++) {
      const k = t.addKey(`k${i}`);
      for (let j = 0; j < 1 + (i % 7); j++)
        t.add(k, lineageNumber(`r${j}@2`), undefined, i * 10 + j);
    }
    for (let i = 0; i < 20_000; i += 3) {
      const k = t.keyNumber(`k${i}`);
      for (let j = 0; j < 1 + (i % 7); j++)
        expect(t.op(t.find(k, lineageNumber(`r${j}@2`)))).toBe(i * 10 + j);
      expect(t.find(k, lineageNumber('r7@2'))).toBe(-1);
    }
    expect(t.size).toBe(20_000);
  });
});
