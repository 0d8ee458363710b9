import type { InstanceReplacedError, LeaseStore } from './lease-store.js';

/** A lease this process holds. */
export interface HeldLease {
  readonly token: number;
  /** When the last successful acquire or renew was sent: the store keeps the lease until at least this + TTL. */
  renewedAt: number;
}

/** Whether this process's partition ownership lets it judge events now, and why not (`/readyz`). */
export interface OwnershipStatus {
  readonly ready: boolean;
  /** Why it is not ready; absent when it is. */
  readonly reason?: string;
  /** Partitions whose lease this process holds. */
  readonly held: number;
  /** Its share of the partitions, as of its last rebalance step; absent before the first. */
  readonly share?: number;
  /** Since when (ISO time) the lease store has not answered; absent while it answers. */
  readonly storeUnreachableSince?: string;
}

/**
 * The leases this process holds, between the two sides that use them: the lease coordinator takes,
 * renews, loses and gives them up; the worker pool runs their partitions and, through this
 * object, reports a partition a worker dropped because its checkpoint was fenced, asks a new token
 * for each partition of a worker it restarts, and reads whether ownership lets it serve. Made
 * first and handed to both, so that neither is given the other after it is made.
 */
export class HeldLeases {
  private readonly held = new Map<number, HeldLease>();
  private settled = false;
  private replacedBy: InstanceReplacedError | undefined;
  private share: number | undefined;
  private unreachableSince: number | undefined;

  constructor(
    private readonly store: Pick<LeaseStore, 'reissue'>,
    private readonly log: (level: 'info' | 'warn', message: string) => void,
  ) {}

  /** {@link status}'s `ready`. */
  get ready(): boolean {
    return this.status().ready;
  }

  /**
   * Ready means this process judges events now: its first rebalance step ran, it has not been
   * replaced, the lease store answers (else its leases may be gone any moment, and it cannot take
   * any), and it holds a partition unless its share is none (more processes than partitions): a
   * process that lost every lease, or waits for its share to be handed over, judges nothing.
   */
  status(): OwnershipStatus {
    const held = this.held.size;
    const base = {
      held,
      ...(this.share === undefined ? {} : { share: this.share }),
      ...(this.unreachableSince === undefined
        ? {}
        : { storeUnreachableSince: new Date(this.unreachableSince).toISOString() }),
    };
    const reason =
      this.replacedBy !== undefined
        ? `instance ${this.replacedBy.instanceId} was taken over by a newer process`
        : this.unreachableSince !== undefined
          ? `lease store unreachable since ${new Date(this.unreachableSince).toISOString()}`
          : !this.settled
            ? 'registering with the lease store'
            : held === 0 && this.share === undefined
              ? 'holds no partition yet (another process is rebalancing)'
              : held === 0 && this.share !== 0
                ? `holds no partition; its share is ${this.share} (waiting for partitions to be released or their leases to expire)`
                : undefined;
    return reason === undefined ? { ready: true, ...base } : { ready: false, reason, ...base };
  }

  /** The first rebalance step ran. */
  settle(): void {
    this.settled = true;
  }

  /** This process's share, from its last rebalance step. */
  assign(share: number): void {
    this.share = share;
  }

  /** The lease store stopped answering at `at` (ms since the epoch). False when it was known already. */
  unreachable(at: number): boolean {
    if (this.unreachableSince !== undefined) return false;
    this.unreachableSince = at;
    return true;
  }

  /** The lease store answers again: since when it did not, or undefined when it did all along. */
  reachable(): number | undefined {
    const since = this.unreachableSince;
    this.unreachableSince = undefined;
    return since;
  }

  /** The instance that replaced this process, if one did. */
  get replaced(): InstanceReplacedError | undefined {
    return this.replacedBy;
  }

  /** A newer process took this instance id: not ready from now on. False when it was known already. */
  replace(e: InstanceReplacedError): boolean {
    if (this.replacedBy !== undefined) return false;
    this.replacedBy = e;
    return true;
  }

  get(p: number): HeldLease | undefined {
    return this.held.get(p);
  }

  has(p: number): boolean {
    return this.held.has(p);
  }

  add(p: number, lease: HeldLease): void {
    this.held.set(p, lease);
  }

  /** Forgets `lease` of `p`; false when `p` is held under another lease (or none) by now. */
  remove(p: number, lease: HeldLease): boolean {
    if (this.held.get(p) !== lease) return false;
    this.held.delete(p);
    return true;
  }

  /** The held leases, as of now. */
  entries(): [number, HeldLease][] {
    return [...this.held];
  }

  clear(): void {
    this.held.clear();
  }

  /** Partitions held, with their fencing tokens. */
  tokens(): Map<number, number> {
    return new Map([...this.held].map(([p, h]) => [p, h.token]));
  }

  /**
   * A new fencing token for the lease of `p`, held with `token` (see `LeaseStore.reissue`): the
   * pool restarts a dead worker's partitions under it. Undefined when the lease is not held with
   * `token` any more; a renewal still on its way for the old token is then not a loss.
   */
  async reissue(p: number, token: number): Promise<number | undefined> {
    const h = this.held.get(p);
    if (h === undefined || h.token !== token) return undefined;
    const fresh = await this.store.reissue(p, token);
    if (fresh === undefined || this.held.get(p) !== h) return undefined;
    // Its expiry is unchanged, and so is the time it was last known renewed.
    this.held.set(p, { token: fresh, renewedAt: h.renewedAt });
    this.log('info', `partition ${p}: lease token ${token} → ${fresh} (worker restart)`);
    return fresh;
  }

  /** A checkpoint of `p` was refused (fenced): the lease is gone, and the worker has stopped `p`. */
  fenced(p: number): void {
    if (this.held.delete(p))
      this.log('warn', `partition ${p}: checkpoint fenced, lease lost to a newer owner`);
  }
}
