import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LineageStates } from '../../rules/lineage-states.js';

// LineageStates is a Map for the partition's purposes: the same answers and the same (insertion)
// order, which checkpoint text depends on, in its flat form and after it has become a Map.

// Inserts weigh most, so that many runs pass the 128 lineages where the flat form becomes a Map.
const op = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({ k: fc.constant('set' as const), sid: fc.nat(199), v: fc.nat() }),
  },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('delete' as const), sid: fc.nat(199) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('get' as const), sid: fc.nat(199) }) },
  // `add` of an absent lineage, with room asked for up to 200 more (the partition passes the hits
  // an event has left).
  {
    weight: 3,
    arbitrary: fc.record({
      k: fc.constant('add' as const),
      sid: fc.nat(199),
      v: fc.nat(),
      more: fc.nat(200),
    }),
  },
);

describe('LineageStates', () => {
  it('answers as a Map does, in the same order, across the change of form (random operations)', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 800, size: 'max' }), (ops) => {
        const ref = new Map<string, unknown>();
        const ls = new LineageStates();
        for (const o of ops) {
          const sid = `r${o.sid}@1`;
          if (o.k === 'set' || (o.k === 'add' && ref.has(sid))) {
            ref.set(sid, { v: o.v });
            ls.set(sid, { v: o.v });
          } else if (o.k === 'add') {
            ref.set(sid, { v: o.v });
            ls.add(sid, { v: o.v }, o.more);
          } else if (o.k === 'delete') expect(ls.delete(sid)).toBe(ref.delete(sid));
          // The flat form never grows past the 128 lineages after which a Map takes over.
          const flat = (ls as unknown as { flat?: unknown[] }).flat;
          expect(flat === undefined || flat.length <= 256).toBe(true);
          expect(ls.get(sid)).toEqual(ref.get(sid));
          expect(ls.has(sid)).toBe(ref.has(sid));
          expect(ls.size).toBe(ref.size);
        }
        expect([...ls]).toEqual([...ref]);
        expect([...ls.keys()]).toEqual([...ref.keys()]);
        expect([...ls.values()]).toEqual([...ref.values()]);
        const walked: [string, unknown][] = [];
        ls.forEach((v, sid) => walked.push([sid, v]));
        expect(walked).toEqual([...ref]);
      }),
      // No shrinking: a case of hundreds of operations would take minutes to shrink.
      { numRuns: 200, endOnFailure: true },
    );
  });

  it('keeps the order of a key past its flat form, a re-added lineage last', () => {
    const ls = new LineageStates(Array.from({ length: 140 }, (_, i) => [`s${i}`, i] as const));
    ls.delete('s3');
    ls.set('s3', 'again');
    ls.set('s0', 'changed');
    const keys = [...ls.keys()];
    expect(keys.length).toBe(140);
    // Past 128 lineages the states are a Map.
    expect((ls as unknown as { map?: unknown }).map).toBeInstanceOf(Map);
    expect(keys[0]).toBe('s0');
    expect(keys[139]).toBe('s3');
    expect(ls.get('s0')).toBe('changed');
    const walked: string[] = [];
    ls.forEach((_, sid) => walked.push(sid));
    expect(walked).toEqual(keys);
    expect(ls.get('s139')).toBe(139);
  });
});
