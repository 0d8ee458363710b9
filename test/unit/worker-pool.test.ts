import { EventEmitter } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import type { VigilOptions } from '../../service/index.js';

/** Stand-in worker threads: they record what the pool sends and answer when the test says so. */
const workers: FakeWorker[] = [];
class FakeWorker extends EventEmitter {
  readonly sent: { op: string; partition?: number; token?: number }[] = [];
  readonly init: { streamsReady?: boolean } | undefined;
  constructor(_url: URL, options?: { workerData?: { streamsReady?: boolean } }) {
    super();
    this.init = options?.workerData;
    workers.push(this);
  }
  postMessage(m: { op: string; partition?: number; token?: number }): void {
    this.sent.push(m);
  }
  terminate(): Promise<number> {
    return Promise.resolve(0);
  }
  stopped(partition: number): void {
    this.emit('message', {
      op: 'partition-stopped',
      partition,
      reason: 'lost',
      checkpointed: false,
    });
  }
  starts(partition: number): number[] {
    return this.sent
      .filter((m) => m.op === 'start-partition' && m.partition === partition)
      .map((m) => m.token ?? -1);
  }
}
vi.mock('node:worker_threads', () => ({ Worker: FakeWorker }));
const { WorkerPool } = await import('../../service/threads/worker-pool.js');

const tick = (): Promise<void> => new Promise((r) => setTimeout(r, 5));
const options = { workers: 2, partitions: 4, workerYoungGenerationMb: 16 } as VigilOptions;

describe('WorkerPool: partitions stopped and started again before a stop is confirmed', () => {
  it('starts a partition only once every worker that ran it has confirmed its stop', async () => {
    workers.length = 0;
    const pool = new WorkerPool(options, () => {});
    pool.start();
    const [a, b] = workers as [FakeWorker, FakeWorker];
    pool.startPartition(0, 1); // a
    pool.startPartition(2, 1); // b
    pool.startPartition(3, 1); // a
    let firstDone = false;
    void pool.stopPartition(0, 'lost').then(() => (firstDone = true)); // a must confirm
    void pool.stopPartition(2, 'lost');
    b.stopped(2);
    pool.startPartition(0, 2); // b now has the fewest: waits for a's stop
    void pool.stopPartition(0, 'lost'); // from b, which never started it
    b.stopped(0);
    await tick();
    pool.startPartition(0, 3);
    await tick();
    // a has not confirmed: partition 0 must not run anywhere yet.
    expect([...a.starts(0), ...b.starts(0)]).toEqual([1]);
    expect(firstDone).toBe(false);
    a.stopped(0);
    await tick();
    expect(firstDone).toBe(true);
    expect([...a.starts(0).slice(1), ...b.starts(0)]).toEqual([3]);
  });

  it('a worker that answers a stop resolves its own, oldest one', async () => {
    workers.length = 0;
    const pool = new WorkerPool({ ...options, workers: 1 }, () => {});
    pool.start();
    const [a] = workers as [FakeWorker];
    pool.startPartition(1, 1);
    let first = false;
    let second = false;
    void pool.stopPartition(1, 'lost').then(() => (first = true));
    pool.startPartition(1, 2);
    void pool.stopPartition(1, 'lost').then(() => (second = true));
    a.stopped(1);
    await tick();
    expect(first).toBe(true);
    expect(second).toBe(false);
    a.stopped(1);
    await tick();
    expect(second).toBe(true);
  });
});

describe('WorkerPool: workers follow CONTROL only once the streams are checked', () => {
  it('tells the workers it started when the streams exist, and starts a restarted one with it', async () => {
    workers.length = 0;
    const pool = new WorkerPool({ ...options, workers: 1 }, () => {});
    pool.start();
    const [a] = workers as [FakeWorker];
    expect(a.init?.streamsReady).toBe(false);
    expect(a.sent.some((m) => m.op === 'streams-ready')).toBe(false);
    pool.streamsReady();
    expect(a.sent.filter((m) => m.op === 'streams-ready')).toHaveLength(1);
    // A crash: the pool starts a new thread after a short delay, and it need not wait.
    a.emit('exit', 1);
    await vi.waitFor(() => expect(workers).toHaveLength(2), { timeout: 2000 });
    expect(workers[1]?.init?.streamsReady).toBe(true);
    await pool.abort();
  });
});
