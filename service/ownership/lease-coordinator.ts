import { planMoves } from './assignment.js';
import type { HeldLease, HeldLeases } from './held-leases.js';
import { InstanceReplacedError, type LeaseStore } from './lease-store.js';

/** Why a partition stops on this process. */
export type StopReason = 'released' | 'lost';

/** Where the partitions of this process run (the worker pool). */
export interface PartitionHost {
  /** Runs partition `p` under fencing token `token`: restore from its checkpoint, then read on. */
  start(p: number, token: number): void;
  /**
   * Stops partition `p`. `released`: stop reading, finish the record in flight, flush alerts,
   * final checkpoint. `lost`: stop at once, no checkpoint (another owner may be restoring it).
   */
  stop(p: number, reason: StopReason): Promise<void>;
}

export interface LeaseCoordinatorOptions {
  readonly partitions: number;
  readonly ttlMs: number;
  readonly renewMs: number;
  readonly log: (level: 'info' | 'warn' | 'error', message: string) => void;
}

/**
 * Holds this process's partition leases and moves partitions towards a balanced assignment.
 *
 * Every `renewMs` it heartbeats its membership and renews its leases. A lease that Redis says is
 * gone, or that could not be renewed for TTL − renewMs (Redis away: it may expire any moment), is
 * lost: the partition stops at once. Then, under a cluster-wide lock so that one process
 * rebalances at a time and each sees the others' last moves, it takes one step of
 * {@link planMoves}: release its surplus (after a final checkpoint) or take free partitions.
 */
export class LeaseCoordinator {
  private members: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  private rebalancing: Promise<void> | undefined;
  private stopping = false;
  private lastWarning = 0;

  /**
   * @param held the leases of this process, shared with the host (which reports fenced
   *   partitions and asks new tokens through it)
   */
  constructor(
    private readonly store: LeaseStore,
    private readonly held: HeldLeases,
    private readonly host: PartitionHost,
    private readonly o: LeaseCoordinatorOptions,
  ) {}

  /** True once the first rebalance step ran, and while this process has not been replaced. */
  get ready(): boolean {
    return this.held.ready;
  }

  /** Partitions this process holds a lease on, with their fencing tokens. */
  leases(): Map<number, number> {
    return this.held.tokens();
  }

  /**
   * Registers this process (retrying while Redis is away) and takes its first partitions; then
   * keeps going every `renewMs`. Never rejects.
   */
  async start(): Promise<void> {
    for (;;) {
      if (this.stopping) return;
      try {
        await this.store.connected(this.o.ttlMs);
        this.members = await this.store.heartbeat(true);
        break;
      } catch (e) {
        this.warn(`cannot register in Redis yet: ${(e as Error).message}`);
        await new Promise((r) => setTimeout(r, this.o.renewMs));
      }
    }
    await this.rebalance();
    this.held.settle();
    this.timer = setInterval(() => this.tick(), this.o.renewMs);
  }

  private tick(): void {
    if (this.held.replaced) return;
    // Also while a renewal round hangs (Redis stalled): Redis may let a lease expire at
    // renewedAt + TTL, so it is given up one renewal interval before that.
    for (const [p, h] of this.held.entries())
      if (Date.now() >= h.renewedAt + this.o.ttlMs - this.o.renewMs)
        this.lose(p, h, 'not renewed in time');
    // Renewals go on while stopping: the partitions are being checkpointed under these leases.
    this.renewing ??= this.renew().finally(() => (this.renewing = undefined));
    if (!this.stopping)
      this.rebalancing ??= this.rebalance().finally(() => (this.rebalancing = undefined));
  }

  private warn(message: string): void {
    // Redis away makes every tick fail: say so once in a while, not ten times a second.
    if (Date.now() - this.lastWarning < 5000) return;
    this.lastWarning = Date.now();
    this.o.log('warn', message);
  }

  private async renew(): Promise<void> {
    try {
      this.members = await this.store.heartbeat();
    } catch (e) {
      if (e instanceof InstanceReplacedError) return this.replaced(e);
      this.warn(`membership heartbeat failed: ${(e as Error).message}`);
    }
    await Promise.all(
      this.held.entries().map(async ([p, h]) => {
        const sentAt = Date.now();
        try {
          if (await this.store.renew(p, h.token)) h.renewedAt = sentAt;
          else this.lose(p, h, 'Redis holds another owner or none');
        } catch (e) {
          // The next tick gives the lease up if it is not renewed in time.
          this.warn(`lease renewal failed: ${(e as Error).message}`);
        }
      }),
    );
  }

  private lose(p: number, h: HeldLease, why: string): void {
    if (!this.held.remove(p, h)) return;
    this.o.log('warn', `partition ${p}: lease lost (${why}); stopping it`);
    void this.host.stop(p, 'lost');
  }

  private replaced(e: InstanceReplacedError): void {
    if (!this.held.replace(e)) return;
    this.o.log('error', `${e.message}; giving up every partition`);
    for (const [p, h] of this.held.entries()) this.lose(p, h, 'instance replaced');
  }

  private async rebalance(): Promise<void> {
    let locked = false;
    try {
      locked = await this.store.lock(this.o.ttlMs);
      if (!locked || this.stopping) return;
      // Membership as of now, under the lock: a process that joined since the last tick counts.
      this.members = await this.store.heartbeat();
      const me = this.store.instanceId;
      const holders = await this.store.holders(this.o.partitions);
      // Leases of an older incarnation of this instance (this process restarted): take them back now.
      for (const [p, h] of holders.entries()) {
        if (h?.instanceId !== me || this.held.has(p)) continue;
        await this.take(p);
      }
      const owners = holders.map((h, p) =>
        this.held.has(p) ? me : h?.instanceId === me ? undefined : h?.instanceId,
      );
      const moves = planMoves(
        me,
        this.members.includes(me) ? this.members : [...this.members, me],
        owners,
      );
      await Promise.all(moves.release.map((p) => this.give(p)));
      for (const p of moves.acquire) {
        if (this.stopping) break;
        await this.take(p);
      }
    } catch (e) {
      if (e instanceof InstanceReplacedError) this.replaced(e);
      else this.warn(`rebalance failed: ${(e as Error).message}`);
    } finally {
      if (locked) await this.store.unlock().catch(() => undefined);
    }
  }

  private async take(p: number): Promise<void> {
    const sentAt = Date.now();
    const token = await this.store.acquire(p);
    if (token === undefined) return;
    if (this.stopping) {
      await this.store.release(p, token);
      return;
    }
    this.held.add(p, { token, renewedAt: sentAt });
    this.o.log('info', `partition ${p}: lease acquired (token ${token})`);
    this.host.start(p, token);
  }

  private async give(p: number): Promise<void> {
    const h = this.held.get(p);
    if (h === undefined) return;
    // Stop and checkpoint while the lease is still ours (renewals go on meanwhile), then release.
    await this.host.stop(p, 'released');
    if (!this.held.remove(p, h)) return;
    await this.store.release(p, h.token).catch(() => undefined);
    this.o.log('info', `partition ${p}: lease released`);
  }

  /**
   * Clean stop, in two steps: `stop()` ends rebalancing (renewals go on while the host stops
   * its partitions with a final checkpoint), then `release()` gives every lease up and leaves.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.rebalancing;
  }

  async release(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.renewing;
    await Promise.all(
      this.held.entries().map(([p, h]) => this.store.release(p, h.token).catch(() => false)),
    );
    this.held.clear();
    await this.store.leave().catch(() => undefined);
    await this.store.close();
  }
}
