import { ServiceError, ServiceErrorCode } from '../errors.js';
import type { LeaseHolder } from './lease-store.js';

/** A lease as a `MemoryStoreBackend` holds it: its holder and when it expires. */
export interface MemoryLease {
  readonly holder: LeaseHolder;
  readonly expiresAt: number;
}

/** A member's registration: its incarnation and when it expires. */
export interface MemoryMember {
  readonly incarnation: string;
  readonly expiresAt: number;
}

/** The rebalance lock: who holds it, until when. */
export interface MemoryLock {
  readonly instanceId: string;
  readonly incarnation: string;
  readonly expiresAt: number;
}

/**
 * One partition's checkpoint, laid out as in Redis (checkpoint-store.ts): the meta hash's fields,
 * the keyed-state hash and the hash of buffered-event chunks.
 */
export interface MemoryCheckpoint {
  /** The token the last write was made under (0: none). */
  fence: number;
  /** The offset of the last write (undefined: none). */
  offset: number | undefined;
  controlSeq: number;
  meta: string | undefined;
  readonly lineages: Map<number, string>;
  state: Map<string, string>;
  buffer: Map<string, string>;
}

/**
 * What one Redis holds for Vigil, in memory: partition leases, fencing-token counters, members and
 * the rebalance lock (for `MemoryLeaseStore`s, one per process), checkpoints and rule sets (for
 * `MemoryCheckpointStore`s, one per worker). Both kinds of store share it, since the fencing token
 * ties them as one Redis does: a new token exceeds the fence of the stored checkpoint
 * ({@link nextToken}), and a checkpoint write under a token older than the last one handed out is
 * refused. For unit tests; `now` is the store's clock (Redis' in production), so a test can move
 * time by hand, and {@link refusing} makes it an unreachable Redis.
 */
export class MemoryStoreBackend {
  readonly leases = new Map<number, MemoryLease>();
  /** The last fencing token handed out per partition: never reset (unless a test loses it). */
  readonly tokens = new Map<number, number>();
  /** Registrations stay until a heartbeat sweeps them once expired, as in Redis' members hash. */
  readonly members = new Map<string, MemoryMember>();
  readonly checkpoints = new Map<number, MemoryCheckpoint>();
  /** The checkpoints of the key spaces' downstream partitions (the re-keying hop), by key space. */
  readonly spaceCheckpoints = new Map<string, Map<number, MemoryCheckpoint>>();
  readonly ruleSets = new Map<number, string>();
  private rebalance: MemoryLock | undefined;
  /**
   * While true, every call of a store on this backend fails, as on a Redis that is down or cut
   * off; what it holds stays, and its leases and registrations go on expiring by its clock (a
   * Redis restarted from its append-only file has the keys of before, less those whose time
   * passed).
   */
  refusing = false;

  constructor(readonly now: () => number = () => Date.now()) {}

  /**
   * Called by the stores at the start of every operation.
   * @throws ServiceError (VIGIL_E_REDIS, retryable) while {@link refusing}
   */
  answer(): void {
    if (this.refusing)
      throw new ServiceError(ServiceErrorCode.Redis, 'connect ECONNREFUSED (store unreachable)', {
        retryable: true,
      });
  }

  /**
   * The lease of `p` unless it expired (an expired one is dropped, as Redis drops the key: once
   * its time is past, not at it).
   */
  lease(p: number): MemoryLease | undefined {
    const l = this.leases.get(p);
    if (l !== undefined && l.expiresAt < this.now()) {
      this.leases.delete(p);
      return undefined;
    }
    return l;
  }

  /** The rebalance lock unless it expired. */
  get lock(): MemoryLock | undefined {
    if (this.rebalance !== undefined && this.rebalance.expiresAt < this.now())
      this.rebalance = undefined;
    return this.rebalance;
  }

  set lock(l: MemoryLock | undefined) {
    this.rebalance = l;
  }

  /**
   * The partition's next fencing token: the counter's next value, or one above the fence stored
   * with the checkpoint should the counter have been lost (else every write of the new owner
   * would be fenced).
   */
  nextToken(p: number): number {
    let token = (this.tokens.get(p) ?? 0) + 1;
    const stored = this.checkpoints.get(p)?.fence ?? 0;
    if (token <= stored) token = stored + 1;
    this.tokens.set(p, token);
    return token;
  }

  /** The checkpoints of the event log's partitions, or of key space `space`'s downstream ones. */
  checkpointsOf(space: string | undefined): Map<number, MemoryCheckpoint> {
    if (space === undefined) return this.checkpoints;
    let m = this.spaceCheckpoints.get(space);
    if (m === undefined) this.spaceCheckpoints.set(space, (m = new Map()));
    return m;
  }

  /** The partition's checkpoint (of key space `space`'s downstream partition), made empty on first use. */
  checkpoint(p: number, space?: string): MemoryCheckpoint {
    const checkpoints = this.checkpointsOf(space);
    let c = checkpoints.get(p);
    if (c === undefined) {
      c = {
        fence: 0,
        offset: undefined,
        controlSeq: 0,
        meta: undefined,
        lineages: new Map(),
        state: new Map(),
        buffer: new Map(),
      };
      checkpoints.set(p, c);
    }
    return c;
  }
}
