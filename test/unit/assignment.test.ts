import { describe, expect, it } from 'vitest';
import { fairShares, planMoves } from '../../service/ownership/assignment.js';

describe('balanced assignment (pure)', () => {
  const owners = (counts: Record<string, number>, free = 0): (string | undefined)[] => [
    ...Object.entries(counts).flatMap(([m, n]) => Array<string>(n).fill(m)),
    ...Array<undefined>(free).fill(undefined),
  ];

  it('shares are ⌊P/k⌋ or ⌈P/k⌉, the larger ones to the largest holders', () => {
    expect(fairShares(['a', 'b', 'c'], new Map(), 16)).toEqual(
      new Map([
        ['a', 6],
        ['b', 5],
        ['c', 5],
      ]),
    );
    expect(
      fairShares(
        ['a', 'b', 'c'],
        new Map([
          ['c', 8],
          ['b', 8],
        ]),
        16,
      ).get('b'),
    ).toBe(6);
  });

  it('a member over its share releases only its surplus, one under it takes only free partitions', () => {
    // a holds everything, b joins: a gives 8 up, b takes none until they are free.
    expect(planMoves('a', ['a', 'b'], owners({ a: 16 })).release).toHaveLength(8);
    expect(planMoves('b', ['a', 'b'], owners({ a: 16 }))).toEqual({
      share: 8,
      release: [],
      acquire: [],
      // a's surplus is on its way to b: b looks again soon.
      incoming: 8,
    });
    expect(planMoves('b', ['a', 'b'], owners({ a: 8 }, 8)).acquire).toHaveLength(8);
    // A third joins: a and b give up 3 and 2 (or 2 and 3), never take from each other.
    const step = planMoves('a', ['a', 'b', 'c'], owners({ a: 8, b: 8 }));
    expect(step.release).toHaveLength(2);
    expect(step.acquire).toEqual([]);
    // Leases of a dead member (not live) are neither free nor counted.
    expect(planMoves('b', ['b'], owners({ dead: 4, b: 2 }, 2))).toEqual({
      share: 8,
      release: [],
      acquire: [6, 7],
      // Nothing is on its way: the dead member's leases expire in their own time.
      incoming: 0,
    });
  });

  it('members presumed alive keep their shares free: the first back after an outage takes only its own, and gives nothing to them', () => {
    // Every lease lapsed in the outage; a is back first, b presumed.
    expect(planMoves('a', ['a'], owners({}, 16), { presumed: ['b'] })).toEqual({
      share: 8,
      release: [],
      acquire: [0, 1, 2, 3, 4, 5, 6, 7],
      incoming: 0,
    });
    // b back: it takes the rest.
    expect(planMoves('b', ['a', 'b'], owners({ a: 8 }, 8)).acquire).toEqual([
      8, 9, 10, 11, 12, 13, 14, 15,
    ]);
    // A presumed member that is live is just a member.
    expect(planMoves('a', ['a', 'b'], owners({}, 16), { presumed: ['b'] }).acquire).toHaveLength(8);
    // What a member holds beyond the share the presumed ones leave it is not given up: a member
    // that may be dead is never handed anything.
    expect(planMoves('a', ['a'], owners({ a: 16 }), { presumed: ['b'] })).toEqual({
      share: 8,
      release: [],
      acquire: [],
      incoming: 0,
    });
    // Odd counts: the larger share goes to the larger holder, among presumed members too.
    expect(planMoves('b', ['b'], owners({}, 5), { presumed: ['a'] }).share).toBe(2);
    expect(planMoves('a', ['a', 'b'], owners({ b: 2 }, 3)).share).toBe(2);
  });

  it('free partitions this member lost are taken first', () => {
    const prefer = new Set([9, 3, 12]);
    expect(planMoves('a', ['a', 'b'], owners({}, 16), { prefer }).acquire).toEqual([
      3, 9, 12, 0, 1, 2, 4, 5,
    ]);
    // Only free ones: one held by b stays b's.
    expect(planMoves('a', ['a', 'b'], owners({ b: 4 }, 12), { prefer }).acquire).toEqual([
      9, 12, 4, 5, 6, 7, 8, 10,
    ]);
  });
});
