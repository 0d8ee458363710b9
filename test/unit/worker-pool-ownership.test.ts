import { EventEmitter } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import type { VigilOptions } from '../../service/index.js';
import { HeldLeases } from '../../service/ownership/held-leases.js';
import { MemoryStoreBackend } from '../../service/ownership/memory-backend.js';
import { MemoryLeaseStore } from '../../service/ownership/memory-lease-store.js';

/** Stand-in worker threads: they record what the pool sends and answer when the test says so. */
const workers: FakeWorker[] = [];
class FakeWorker extends EventEmitter {
  readonly sent: { op: string; partition?: number; token?: number }[] = [];
  readonly init: { partitions: { partition: number; token: number }[] };
  constructor(_url: URL, options: { workerData: FakeWorker['init'] }) {
    super();
    this.init = options.workerData;
    workers.push(this);
  }
  postMessage(m: { op: string; partition?: number; token?: number }): void {
    this.sent.push(m);
  }
  terminate(): Promise<number> {
    return Promise.resolve(0);
  }
  say(m: object): void {
    this.emit('message', m);
  }
}
vi.mock('node:worker_threads', () => ({ Worker: FakeWorker }));
const { WorkerPool } = await import('../../service/threads/worker-pool.js');

const options = { workers: 1, partitions: 4, workerYoungGenerationMb: 16 } as VigilOptions;
const timings = { loadMs: 0, restoreMs: 0, consumerMs: 0, keys: 0 };

/** A process holding the leases of `partitions` in a memory store, and its pool on one fake worker. */
async function poolWithLeases(partitions: number[]) {
  workers.length = 0;
  const backend = new MemoryStoreBackend();
  const store = new MemoryLeaseStore(backend, 'a', 'i1', 10_000);
  await store.heartbeat(true);
  const logs: string[] = [];
  const held = new HeldLeases(store, (_l, m) => void logs.push(m));
  for (const p of partitions) held.add(p, { token: (await store.acquire(p)) ?? 0, renewedAt: 0 });
  const pool = new WorkerPool(options, () => {}, held);
  pool.start();
  const worker = workers[0] as FakeWorker;
  for (const p of partitions) pool.startPartition(p, held.get(p)?.token ?? 0);
  worker.say({ op: 'ready' });
  for (const p of partitions) worker.say({ op: 'partition-started', partition: p, ...timings });
  return { pool, held, backend, store, worker, logs };
}

describe('WorkerPool with the leases it is given', () => {
  it('is ready only once ownership is settled', async () => {
    const { pool, held } = await poolWithLeases([0, 1]);
    expect(pool.ready).toBe(false);
    held.settle();
    expect(pool.ready).toBe(true);
    await pool.abort();
  });

  it('is not ready while the lease store does not answer, nor holding nothing while its share is some; /readyz says why', async () => {
    const { pool, held } = await poolWithLeases([0, 1]);
    held.settle();
    held.assign(2);
    expect(pool.ready).toBe(true);
    expect(pool.ownershipStatus()).toEqual({ ready: true, held: 2, share: 2 });
    const at = Date.parse('2030-01-02T03:04:05.000Z');
    held.unreachable(at);
    expect(pool.ready).toBe(false);
    expect(pool.ownershipStatus()).toEqual({
      ready: false,
      reason: 'lease store unreachable since 2030-01-02T03:04:05.000Z',
      held: 2,
      share: 2,
      storeUnreachableSince: '2030-01-02T03:04:05.000Z',
    });
    expect(held.reachable()).toBe(at);
    expect(pool.ready).toBe(true);
    // Every lease lost (its workers stopped the partitions): nothing judged here any more.
    for (const p of [0, 1]) {
      const lease = held.get(p);
      if (lease) held.remove(p, lease);
      void pool.stopPartition(p, 'lost');
    }
    expect(pool.ready).toBe(false);
    expect(pool.ownershipStatus()?.reason).toMatch(/^holds no partition; its share is 2/);
    // Its share is none: ready with nothing.
    held.assign(0);
    expect(pool.ready).toBe(true);
    await pool.abort();
  });

  it('without leases it is ready as soon as its workers are', async () => {
    workers.length = 0;
    const pool = new WorkerPool(options, () => {});
    pool.start();
    (workers[0] as FakeWorker).say({ op: 'ready' });
    expect(pool.ready).toBe(true);
    expect(pool.ownershipStatus()).toBeUndefined();
    await pool.abort();
  });

  it('a partition a worker dropped because its checkpoint was fenced is forgotten here and in the leases', async () => {
    const { pool, held, worker, logs } = await poolWithLeases([0, 1]);
    worker.say({ op: 'partition-stopped', partition: 1, reason: 'fenced', checkpointed: false });
    expect(pool.held()).toEqual([0]);
    expect(held.has(1)).toBe(false);
    expect(held.has(0)).toBe(true);
    expect(logs).toContain('partition 1: checkpoint fenced, lease lost to a newer owner');
    await pool.abort();
  });

  it('a dead worker starts again with its partitions under new fencing tokens from the store', async () => {
    const { pool, held, worker } = await poolWithLeases([0, 2]);
    expect(worker.sent.filter((m) => m.op === 'start-partition').map((m) => m.token)).toEqual([
      1, 1,
    ]);
    worker.emit('exit', 1);
    await vi.waitFor(() => expect(workers).toHaveLength(2), { timeout: 2000 });
    expect((workers[1] as FakeWorker).init.partitions).toEqual([
      { partition: 0, token: 2 },
      { partition: 2, token: 2 },
    ]);
    expect(held.tokens()).toEqual(
      new Map([
        [0, 2],
        [2, 2],
      ]),
    );
    await pool.abort();
  });

  it('when the store cannot give a new token, the restarted worker keeps the old one', async () => {
    const { pool, worker, store } = await poolWithLeases([3]);
    await store.close();
    worker.emit('exit', 1);
    await vi.waitFor(() => expect(workers).toHaveLength(2), { timeout: 2000 });
    expect((workers[1] as FakeWorker).init.partitions).toEqual([{ partition: 3, token: 1 }]);
    await pool.abort();
  });
});
