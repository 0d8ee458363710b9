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
  /** This member's share (the smaller one when members are presumed: see {@link planMoves}). */
  readonly share: number;
  /** Partitions to checkpoint and give up (the highest-numbered of its own). */
  readonly release: number[];
  /** Free partitions to try to take, in order, until the share is reached. */
  readonly acquire: number[];
  /**
   * How many of the partitions it is short of are held by live members over their share: they
   * are about to be released to it, so it should look again soon rather than at its next round.
   */
  readonly incoming: number;
}

/** What a member knows beyond the owners, for {@link planMoves}. */
export interface PlanContext {
  /**
   * Members that are not live but may be only because they have not had the time to say so (this
   * member just regained the store after an outage, during which every registration lapsed).
   */
  readonly presumed?: readonly string[];
  /** Partitions to take first when they are free (those this member lost in an outage). */
  readonly prefer?: ReadonlySet<number>;
}

/**
 * One member's step towards its share: `owners[p]` is the instance holding partition p
 * (undefined: free). Leases of members that are not live (a dead process whose leases have not
 * expired yet) are neither free nor counted.
 *
 * The shares are computed over the `presumed` members too for what this member takes, so that
 * the first member back after an outage does not take every free partition only to hand most of
 * them over again once the others are back. What it gives up is computed over the live members
 * alone: a member that may be dead is never handed anything.
 */
export function planMoves(
  me: string,
  members: readonly string[],
  owners: readonly (string | undefined)[],
  context: PlanContext = {},
): Moves {
  const live = new Set(members);
  const held = new Map<string, number>();
  for (const o of owners) if (o !== undefined && live.has(o)) held.set(o, (held.get(o) ?? 0) + 1);
  const shares = fairShares(members, held, owners.length);
  const liveShare = shares.get(me) ?? 0;
  const others = (context.presumed ?? []).filter((m) => !live.has(m));
  const share =
    others.length === 0
      ? liveShare
      : Math.min(liveShare, fairShares([...members, ...others], held, owners.length).get(me) ?? 0);
  const mine = owners.flatMap((o, p) => (o === me ? [p] : []));
  if (mine.length > liveShare)
    return { share: liveShare, release: mine.slice(liveShare).reverse(), acquire: [], incoming: 0 };
  const prefer = context.prefer ?? new Set<number>();
  const free = owners.flatMap((o, p) => (o === undefined ? [p] : []));
  const ordered = [...free.filter((p) => prefer.has(p)), ...free.filter((p) => !prefer.has(p))];
  const acquire = ordered.slice(0, Math.max(0, share - mine.length));
  let surplus = 0;
  for (const [m, n] of held) if (m !== me) surplus += Math.max(0, n - (shares.get(m) ?? 0));
  const incoming = Math.min(surplus, Math.max(0, share - mine.length - acquire.length));
  return { share, release: [], acquire, incoming };
}
