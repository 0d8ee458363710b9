import { Redis } from 'ioredis';
import {
  RedisCheckpointStore,
  type CheckpointStore,
} from '../../service/checkpoint/checkpoint-store.js';
import { MemoryCheckpointStore } from '../../service/checkpoint/memory-checkpoint-store.js';
import {
  leaseKeys,
  RedisLeaseStore,
  type LeaseStore,
} from '../../service/ownership/lease-store.js';
import { MemoryStoreBackend } from '../../service/ownership/memory-backend.js';
import { MemoryLeaseStore } from '../../service/ownership/memory-lease-store.js';

/**
 * One keyspace of lease and checkpoint stores, as the contract suites use it: every store made
 * from one env shares it (as the processes and workers of one deployment share one Redis), and
 * no two envs see each other's keys.
 */
export interface StoreEnv {
  /** What the suites' titles name. */
  readonly name: string;
  /** The lease store of one process (not registered yet: its first heartbeat does that). */
  leaseStore(instanceId: string, incarnation: string, ttlMs: number): Promise<LeaseStore>;
  checkpointStore(): Promise<CheckpointStore>;
  /** Lets `ms` of the store's time pass (a real sleep for Redis, whose clock the TTLs follow). */
  elapse(ms: number): Promise<void>;
  /** Loses partition `p`'s token counter, as a Redis restored from an older snapshot would. */
  loseTokenCounter(p: number): Promise<void>;
  /** Closes every store made. */
  close(): Promise<void>;
}

/** Makes a fresh env per test. */
export type StoreEnvFactory = () => Promise<StoreEnv>;

/** Stores on a real redis-server at `url` (ask for it lazily: the server starts in `beforeAll`), each env under a new key prefix. */
export function redisStoreEnv(url: () => string): StoreEnvFactory {
  let run = 0;
  return async () => {
    const prefix = `c${Date.now().toString(36)}${run++}:`;
    const closing: { close(): Promise<void> }[] = [];
    return {
      name: 'Redis',
      async leaseStore(instanceId, incarnation, ttlMs) {
        const s = new RedisLeaseStore(url(), instanceId, incarnation, ttlMs, prefix);
        closing.push(s);
        await s.connected();
        return s;
      },
      async checkpointStore() {
        const s = new RedisCheckpointStore(url(), prefix);
        closing.push(s);
        return s;
      },
      elapse: (ms) => new Promise((r) => setTimeout(r, ms)),
      async loseTokenCounter(p) {
        const raw = new Redis(url());
        await raw.del(leaseKeys.token(p, prefix));
        await raw.quit();
      },
      async close() {
        for (const s of closing) await s.close();
      },
    };
  };
}

/** Stores on one {@link MemoryStoreBackend} per env, on a clock `elapse` moves at once. */
export function memoryStoreEnv(): StoreEnvFactory {
  return async () => {
    let now = 1_700_000_000_000;
    const backend = new MemoryStoreBackend(() => now);
    const closing: { close(): Promise<void> }[] = [];
    return {
      name: 'memory',
      async leaseStore(instanceId, incarnation, ttlMs) {
        const s = new MemoryLeaseStore(backend, instanceId, incarnation, ttlMs);
        closing.push(s);
        return s;
      },
      async checkpointStore() {
        const s = new MemoryCheckpointStore(backend);
        closing.push(s);
        return s;
      },
      async elapse(ms) {
        now += ms;
      },
      async loseTokenCounter(p) {
        backend.tokens.delete(p);
      },
      async close() {
        for (const s of closing) await s.close();
      },
    };
  };
}
