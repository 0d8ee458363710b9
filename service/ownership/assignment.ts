/**
 * Balanced partition assignment, as a pure function of what every process can read in Redis:
 * the live members and who holds each partition's lease.
 *
 * With k members and P partitions every member's share is ⌊P/k⌋ or ⌈P/k⌉; the P mod k larger
 * shares go to the members that hold the most partitions now (ties: the smaller instance id).
 * Giving the larger shares to the largest holders is what makes the number of moves minimal:
 * a member over its share only gives partitions up, one under it only takes free ones, so no
 * partition moves between two members that both keep their share.
 */

/** The share of each live member. */
export function fairShares(
  members: readonly string[],
  held: ReadonlyMap<string, number>,
  partitions: number,
): Map<string, number> {
  const k = members.length;
  const out = new Map<string, number>();
  if (k === 0) return out;
  const base = Math.floor(partitions / k);
  const extra = partitions % k;
  const ranked = [...members].sort(
    (a, b) => (held.get(b) ?? 0) - (held.get(a) ?? 0) || (a < b ? -1 : a > b ? 1 : 0),
  );
  ranked.forEach((m, i) => out.set(m, base + (i < extra ? 1 : 0)));
  return out;
}

/** What one member does in one rebalance step. */
export interface Moves {
  /** Partitions to checkpoint and give up (the highest-numbered of its own). */
  readonly release: number[];
  /** Free partitions to try to take, in order, until the share is reached. */
  readonly acquire: number[];
}

/**
 * One member's step towards its share: `owners[p]` is the instance holding partition p
 * (undefined: free). Leases of members that are not live (a dead process whose leases have not
 * expired yet) are neither free nor counted.
 */
export function planMoves(
  me: string,
  members: readonly string[],
  owners: readonly (string | undefined)[],
): Moves {
  const live = new Set(members);
  const held = new Map<string, number>();
  for (const o of owners) if (o !== undefined && live.has(o)) held.set(o, (held.get(o) ?? 0) + 1);
  const share = fairShares(members, held, owners.length).get(me) ?? 0;
  const mine = owners.flatMap((o, p) => (o === me ? [p] : []));
  if (mine.length > share) return { release: mine.slice(share).reverse(), acquire: [] };
  const free = owners.flatMap((o, p) => (o === undefined ? [p] : []));
  return { release: [], acquire: free.slice(0, share - mine.length) };
}
