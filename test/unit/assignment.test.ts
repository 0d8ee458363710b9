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
    expect(planMoves('b', ['a', 'b'], owners({ a: 16 }))).toEqual({ release: [], acquire: [] });
    expect(planMoves('b', ['a', 'b'], owners({ a: 8 }, 8)).acquire).toHaveLength(8);
    // A third joins: a and b give up 3 and 2 (or 2 and 3), never take from each other.
    const step = planMoves('a', ['a', 'b', 'c'], owners({ a: 8, b: 8 }));
    expect(step.release).toHaveLength(2);
    expect(step.acquire).toEqual([]);
    // Leases of a dead member (not live) are neither free nor counted.
    expect(planMoves('b', ['b'], owners({ dead: 4, b: 2 }, 2))).toEqual({
      release: [],
      acquire: [6, 7],
    });
  });
});
