import { Worker } from 'node:worker_threads';
import { AggregatorRegistry, type Registry } from 'prom-client';
import type { VigilOptions } from './config.js';
import type { FromWorker, ToWorker, WorkerInit } from './worker.js';

export type Logger = (level: 'info' | 'warn' | 'error', message: string) => void;

interface Slot {
  readonly index: number;
  readonly partitions: number[];
  worker: Worker | undefined;
  ready: boolean;
  checkpointsOk: boolean;
  restarts: number;
}

/** Partition p belongs to worker p mod W. */
export function assignPartitions(partitions: number, workers: number): number[][] {
  const out: number[][] = Array.from({ length: Math.min(workers, partitions) }, () => []);
  for (let p = 0; p < partitions; p++) out[p % out.length]?.push(p);
  return out;
}

/**
 * Runs W worker threads, each owning a share of the partitions. A worker that dies is restarted
 * (it replays its partitions). Metrics of all workers are merged into one exposition.
 */
export class WorkerPool {
  private readonly slots: Slot[];
  private stopping = false;
  private nextId = 0;
  private readonly pending = new Map<number, (metrics: unknown) => void>();

  constructor(
    private readonly options: VigilOptions,
    private readonly log: Logger,
  ) {
    this.slots = assignPartitions(options.partitions, options.workers).map((partitions, index) => ({
      index,
      partitions,
      worker: undefined,
      ready: false,
      checkpointsOk: true,
      restarts: 0,
    }));
  }

  start(): void {
    for (const s of this.slots) this.spawn(s);
  }

  /** Per worker: its partitions and whether it is ready. */
  status(): {
    worker: number;
    partitions: number[];
    ready: boolean;
    checkpointsOk: boolean;
    restarts: number;
  }[] {
    return this.slots.map((s) => ({
      worker: s.index,
      partitions: s.partitions,
      ready: s.ready,
      checkpointsOk: s.checkpointsOk,
      restarts: s.restarts,
    }));
  }

  /** Every worker caught up with CONTROL, running its partitions, and checkpointing. */
  get ready(): boolean {
    return this.slots.every((s) => s.ready && s.checkpointsOk);
  }

  private spawn(s: Slot): void {
    const init: WorkerInit = { index: s.index, options: this.options, partitions: s.partitions };
    // worker-entry.mjs registers the TypeScript loader in the thread, then loads worker.ts.
    const w = new Worker(new URL('./worker-entry.mjs', import.meta.url), { workerData: init });
    s.worker = w;
    s.ready = false;
    s.checkpointsOk = true;
    w.on('message', (m: FromWorker) => {
      if (m.op === 'ready') s.ready = true;
      else if (m.op === 'checkpoints') s.checkpointsOk = m.ok;
      else if (m.op === 'log') this.log(m.level, m.message);
      else if (m.op === 'metrics') {
        this.pending.get(m.id)?.(m.metrics);
        this.pending.delete(m.id);
      }
    });
    w.on('error', (err) =>
      this.log('error', `worker ${s.index} failed: ${err.stack ?? err.message}`),
    );
    w.on('exit', (code) => {
      s.ready = false;
      s.worker = undefined;
      if (this.stopping) return;
      s.restarts++;
      this.log('warn', `worker ${s.index} exited (code ${code}); restarting it`);
      setTimeout(() => !this.stopping && this.spawn(s), Math.min(5000, 250 * s.restarts));
    });
  }

  /**
   * Ends a worker thread at once, as a crash would: it is restarted like a crashed one and its
   * partitions recover from their checkpoints. For tests and for operators unsticking a worker.
   */
  async terminate(index: number): Promise<void> {
    await this.slots[index]?.worker?.terminate();
  }

  /** The merged metrics of every live worker. */
  async metrics(extra: Registry[] = []): Promise<Registry> {
    const parts = await Promise.all(
      this.slots.map(
        (s) =>
          new Promise<unknown>((resolve) => {
            if (s.worker === undefined) return resolve([]);
            const id = this.nextId++;
            this.pending.set(id, resolve);
            s.worker.postMessage({ op: 'metrics', id } satisfies ToWorker);
            setTimeout(() => {
              if (this.pending.delete(id)) resolve([]);
            }, 5000);
          }),
      ),
    );
    const own = await Promise.all(extra.map((r) => r.getMetricsAsJSON()));
    return AggregatorRegistry.aggregate([...parts, ...own] as object[]);
  }

  /** Stops every worker gracefully: they finish in-flight records and flush alerts. */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(
      this.slots.map(
        (s) =>
          new Promise<void>((resolve) => {
            const w = s.worker;
            if (w === undefined) return resolve();
            const timer = setTimeout(() => void w.terminate(), 30_000);
            w.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            w.postMessage({ op: 'stop' } satisfies ToWorker);
          }),
      ),
    );
  }
}
