import { planMoves } from './assignment.js';
import type { HeldLease, HeldLeases } from './held-leases.js';
import { InstanceReplacedError, type LeaseStore } from './lease-store.js';
import { Membership } from './membership.js';

/** The lease-store operations of the coordinator, as `vigil_lease_store_failures_total` labels them. */
export const LEASE_STORE_OPS = [
  'register',
  'heartbeat',
  'renew',
  'lock',
  'holders',
  'acquire',
  'release',
  'unlock',
] as const;
export type LeaseStoreOp = (typeof LEASE_STORE_OPS)[number];

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
 * lost: the partition stops at once. While the heartbeat or a renewal fails the process is not
 * ready (said once when the store stops answering, once when it answers again). Then, under a
 * cluster-wide lock so that one process rebalances at a time and each sees the others' last
 * moves, it takes one step of {@link planMoves}: take free partitions up to its share (leaving
 * the shares of the members it presumes alive after an outage: {@link Membership}), or decide
 * which of its own to release; those are released after the lock is let go, each once its final
 * checkpoint is written, so that its new owner (which looks again every `followUpMs` while
 * partitions are on their way to it) can take it at once.
 */
export class LeaseCoordinator {
  private readonly membership: Membership;
  private timer: NodeJS.Timeout | undefined;
  private followUp: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  private rebalancing: Promise<void> | undefined;
  private stopping = false;
  private lastWarning = 0;
  /** The last step left this process short of partitions that live members are about to release. */
  private expecting = false;
  private readonly failures = new Map<LeaseStoreOp, number>();
  /** Partitions this process lost and has not taken back: taken first when free (after an outage). */
  private readonly lost = new Set<number>();

  /**
   * @param held the leases of this process, shared with the host (which reports fenced
   *   partitions and asks new tokens through it)
   */
  constructor(
    private readonly store: LeaseStore,
    private readonly held: HeldLeases,
    private readonly host: PartitionHost,
    private readonly o: LeaseCoordinatorOptions,
  ) {
    this.membership = new Membership(store.instanceId, o.ttlMs);
    // Every operation has its series from the start, so that a rate over it is 0, not absent.
    for (const op of LEASE_STORE_OPS) this.failures.set(op, 0);
  }

  /** Whether ownership lets this process serve (see `HeldLeases.status`). */
  get ready(): boolean {
    return this.held.ready;
  }

  /** Failed lease-store calls so far, by operation (`vigil_lease_store_failures_total`). */
  storeFailures(): ReadonlyMap<LeaseStoreOp, number> {
    return this.failures;
  }

  /** How soon a process short of partitions others are releasing looks again. */
  private get followUpMs(): number {
    return Math.max(20, Math.min(100, Math.floor(this.o.renewMs / 4)));
  }

  /** A store call, counted when it fails (not when it says this process was replaced). */
  private async call<T>(op: LeaseStoreOp, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      if (!(e instanceof InstanceReplacedError))
        this.failures.set(op, (this.failures.get(op) ?? 0) + 1);
      throw e;
    }
  }

  /** Heartbeats (registers with `claim`) and reads the live members. */
  private async heartbeat(claim = false): Promise<void> {
    try {
      const live = await this.call(claim ? 'register' : 'heartbeat', () =>
        this.store.heartbeat(claim),
      );
      this.membership.seen(live, Date.now());
    } catch (e) {
      if (!(e instanceof InstanceReplacedError)) this.membership.failed();
      throw e;
    }
  }

  /** The store did not answer: said once, until it answers again. */
  private cutOff(e: Error, registering = false): void {
    if (!this.held.unreachable(Date.now())) return;
    this.o.log(
      'warn',
      registering
        ? `cannot register in Redis yet (${e.message}): not ready; trying again every ${this.o.renewMs} ms`
        : `lease store unreachable (${e.message}): not ready until it answers; leases not renewed within ${this.o.ttlMs - this.o.renewMs} ms are given up`,
    );
  }

  /** The store answered a whole renewal round (or the registration). */
  private reached(): void {
    const since = this.held.reachable();
    if (since !== undefined)
      this.o.log('info', `lease store reachable again after ${Date.now() - since} ms`);
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
        await this.call('register', () => this.store.connected(this.o.ttlMs));
        await this.heartbeat(true);
        break;
      } catch (e) {
        this.cutOff(e as Error, true);
        await new Promise((r) => setTimeout(r, this.o.renewMs));
      }
    }
    this.reached();
    await this.rebalance();
    this.held.settle();
    this.timer = setInterval(() => this.tick(), this.o.renewMs);
    this.scheduleFollowUp();
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
    this.step();
  }

  /** One rebalance step, unless one is under way (or stopping). */
  private step(): void {
    if (this.stopping || this.held.replaced !== undefined) return;
    this.rebalancing ??= this.rebalance().finally(() => {
      this.rebalancing = undefined;
      this.scheduleFollowUp();
    });
  }

  /** Looks again soon while partitions are on their way to this process. */
  private scheduleFollowUp(): void {
    if (!this.expecting || this.stopping || this.followUp !== undefined) return;
    this.followUp = setTimeout(() => {
      this.followUp = undefined;
      this.step();
    }, this.followUpMs);
  }

  private warn(message: string): void {
    // While the store answers, a failing rebalance is said once in a while, not every tick.
    if (this.held.status().storeUnreachableSince !== undefined) return;
    if (Date.now() - this.lastWarning < 5000) return;
    this.lastWarning = Date.now();
    this.o.log('warn', message);
  }

  private async renew(): Promise<void> {
    let failure: Error | undefined;
    try {
      await this.heartbeat();
    } catch (e) {
      if (e instanceof InstanceReplacedError) return this.replaced(e);
      failure = e as Error;
    }
    await Promise.all(
      this.held.entries().map(async ([p, h]) => {
        const sentAt = Date.now();
        try {
          if (await this.call('renew', () => this.store.renew(p, h.token))) h.renewedAt = sentAt;
          else this.lose(p, h, 'Redis holds another owner or none');
        } catch (e) {
          // The next tick gives the lease up if it is not renewed in time.
          failure ??= e as Error;
        }
      }),
    );
    if (failure === undefined) this.reached();
    else this.cutOff(failure);
  }

  private lose(p: number, h: HeldLease, why: string): void {
    if (!this.held.remove(p, h)) return;
    this.lost.add(p);
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
    let release: number[] = [];
    try {
      locked = await this.call('lock', () => this.store.lock(this.o.ttlMs));
      if (this.stopping) return;
      if (!locked) {
        // Another process is rebalancing (for a few ms now that releases wait outside the
        // lock): one short of its share tries again soon, not a renewal interval later.
        const { held, share } = this.held.status();
        this.expecting = share === undefined || held < share;
        return;
      }
      this.expecting = false;
      // Membership as of now, under the lock, read before anything is taken: a process that
      // joined since the last tick counts.
      await this.heartbeat();
      const me = this.store.instanceId;
      const holders = await this.call('holders', () => this.store.holders(this.o.partitions));
      // Leases of an older incarnation of this instance (this process restarted): take them back now.
      for (const [p, h] of holders.entries()) {
        if (h?.instanceId !== me || this.held.has(p)) continue;
        await this.take(p);
      }
      const owners = holders.map((h, p) =>
        this.held.has(p) ? me : h?.instanceId === me ? undefined : h?.instanceId,
      );
      const now = Date.now();
      const moves = planMoves(me, this.membership.members, owners, {
        presumed: this.membership.presumed(now),
        prefer: this.lost,
      });
      this.held.assign(moves.share);
      release = moves.release;
      for (const p of moves.acquire) {
        if (this.stopping) break;
        await this.take(p);
      }
      this.expecting = moves.incoming > 0;
    } catch (e) {
      this.expecting = false;
      if (e instanceof InstanceReplacedError) this.replaced(e);
      else {
        // The renewal round of the same tick says whether the store is away (then that is
        // what is said, once): this failure is news only if the store answers it.
        await this.renewing;
        this.warn(`rebalance failed: ${(e as Error).message}`);
      }
    } finally {
      if (locked) await this.call('unlock', () => this.store.unlock()).catch(() => undefined);
    }
    // Outside the lock: a final checkpoint can take seconds (it waits for a restore under way,
    // for alerts to be acknowledged), and the new owner must be able to take each partition as
    // soon as it is released, not once the slowest of them is. The decision was made under the
    // lock; until they are released these partitions count as this process's.
    await Promise.all(release.map((p) => this.give(p)));
  }

  private async take(p: number): Promise<void> {
    const sentAt = Date.now();
    const token = await this.call('acquire', () => this.store.acquire(p));
    if (token === undefined) return;
    if (this.stopping) {
      await this.call('release', () => this.store.release(p, token));
      return;
    }
    this.held.add(p, { token, renewedAt: sentAt });
    this.lost.delete(p);
    this.o.log('info', `partition ${p}: lease acquired (token ${token})`);
    this.host.start(p, token);
  }

  private async give(p: number): Promise<void> {
    const h = this.held.get(p);
    if (h === undefined) return;
    // Stop and checkpoint while the lease is still ours (renewals go on meanwhile), then release.
    await this.host.stop(p, 'released');
    if (!this.held.remove(p, h)) return;
    // Should this fail, the lease expires a TTL after its last renewal.
    await this.call('release', () => this.store.release(p, h.token)).catch(() => undefined);
    this.o.log('info', `partition ${p}: lease released`);
  }

  /**
   * Clean stop, in two steps: `stop()` ends rebalancing (renewals go on while the host stops
   * its partitions with a final checkpoint), then `release()` gives every lease up and leaves.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.followUp) clearTimeout(this.followUp);
    await this.rebalancing;
  }

  async release(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    if (this.followUp) clearTimeout(this.followUp);
    await this.renewing;
    await Promise.all(
      this.held.entries().map(([p, h]) => this.store.release(p, h.token).catch(() => false)),
    );
    this.held.clear();
    await this.store.leave().catch(() => undefined);
    await this.store.close();
  }
}
