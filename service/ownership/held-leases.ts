import type { InstanceReplacedError, LeaseStore } from './lease-store.js';

/** A lease this process holds. */
export interface HeldLease {
  readonly token: number;
  /** When the last successful acquire or renew was sent: the store keeps the lease until at least this + TTL. */
  renewedAt: number;
}

/**
 * The leases this process holds, between the two sides that use them: the lease coordinator takes,
 * renews, loses and gives them up; the worker pool runs their partitions and, through this
 * object, reports a partition a worker dropped because its checkpoint was fenced, asks a new token
 * for each partition of a worker it restarts, and reads whether ownership is settled. Made first
 * and handed to both, so that neither is given the other after it is made.
 */
export class HeldLeases {
  private readonly held = new Map<number, HeldLease>();
  private settled = false;
  private replacedBy: InstanceReplacedError | undefined;

  constructor(
    private readonly store: Pick<LeaseStore, 'reissue'>,
    private readonly log: (level: 'info' | 'warn', message: string) => void,
  ) {}

  /** True once the coordinator's first rebalance step ran, and while this process has not been replaced. */
  get ready(): boolean {
    return this.settled && this.replacedBy === undefined;
  }

  /** The first rebalance step ran. */
  settle(): void {
    this.settled = true;
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
