import type { Worker } from 'node:worker_threads';
import { AggregatorRegistry, type Registry } from 'prom-client';
import { ActivationLog } from '../control/activation-log.js';
import type { VigilOptions } from '../config.js';
import { GcPauseLog } from '../metrics/gc-pauses.js';
import type { OwnershipStatus } from '../ownership/held-leases.js';
import type { FromWorker, ToWorker, WorkerInit } from './worker-protocol.js';
import { launchWorker } from './worker-launch.js';
import { RetiredMetrics } from './retired-metrics.js';
import type { PartitionStart, ServiceStatus, WorkerStatus } from '../status.js';

export type Logger = (level: 'info' | 'warn' | 'error', message: string) => void;

/**
 * What the pool needs of partition ownership (the leases this process holds), given when it is
 * made. Without leases (checkpoints off) every partition is this process's: {@link NO_OWNERSHIP}.
 */
export interface PoolOwnership {
  /** A worker stopped partition `p` by itself because its checkpoint was fenced (the lease is gone). */
  fenced(p: number): void;
  /**
   * A new fencing token for partition `p`, held with `token`, asked before a dead worker's
   * partitions start again; undefined keeps the old one.
   */
  reissue(p: number, token: number): Promise<number | undefined>;
  /**
   * Whether partition ownership lets this process judge events now, and why not (the lease store
   * unreachable, no partition held while its share is some); undefined without leases.
   */
  status(): OwnershipStatus | undefined;
}

/** Ownership without leases: nothing is fenced or reissued, and every partition is this process's. */
export const NO_OWNERSHIP: PoolOwnership = {
  fenced: () => {},
  reissue: () => Promise.resolve(undefined),
  status: () => undefined,
};

interface Slot {
  readonly index: number;
  /** Partitions assigned to this worker, with their fencing tokens. */
  readonly partitions: Map<number, number>;
  /** Those of them running (restored and reading), with when and how they started. */
  readonly started: Map<number, PartitionStart>;
  worker: Worker | undefined;
  ready: boolean;
  checkpointsOk: boolean;
  natsConnected: boolean;
  restarts: number;
  recycles: number;
  /**
   * The thread is being replaced at its own request (see `workerRecycleSlackMb`): it was asked to
   * stop, and `stopped` says it ended cleanly, with a final checkpoint of every partition.
   */
  recycling: { stopped: boolean } | undefined;
}

/** A stop of a partition sent to a worker and not yet confirmed. */
interface PendingStop {
  readonly slot: Slot;
  readonly done: () => void;
  readonly promise: Promise<void>;
}

/**
 * Runs W worker threads and the partitions this process holds on them. Partitions come and go
 * at run time ({@link startPartition}, {@link stopPartition}): each goes to the worker with the
 * fewest. A worker that dies is restarted with its partitions (they restore from their
 * checkpoints). Metrics of all workers are merged into one exposition.
 */
export class WorkerPool implements ServiceStatus {
  private readonly slots: Slot[];
  private stopping = false;
  private streamsChecked = false;
  private nextId = 0;
  private readonly pending = new Map<number, (metrics: unknown) => void>();
  /**
   * Stops asked of a worker and not yet confirmed, by partition, oldest first. A partition can be
   * stopped, started and stopped again before the first stop is confirmed: each stop waits for its
   * own worker's reply, and a start waits for all of them.
   */
  private readonly stops = new Map<number, PendingStop[]>();
  /** Control sequence applied per partition, and recent activation times, as workers report them. */
  readonly activations = new ActivationLog();
  /** Recent long garbage-collection pauses of each worker (by worker index). */
  readonly gcPauses = new GcPauseLog();
  private readonly retired = new RetiredMetrics();
  /** The key spaces the workers' rule sets re-key to (each held partition has one of each). */
  private readonly spaces = new Set<string>();

  constructor(
    private readonly options: VigilOptions,
    private readonly log: Logger,
    private readonly ownership: PoolOwnership = NO_OWNERSHIP,
  ) {
    this.slots = Array.from({ length: Math.max(1, options.workers) }, (_, index) => ({
      index,
      partitions: new Map<number, number>(),
      started: new Map<number, PartitionStart>(),
      worker: undefined,
      ready: false,
      checkpointsOk: true,
      natsConnected: true,
      restarts: 0,
      recycles: 0,
      recycling: undefined,
    }));
  }

  /**
   * Starts the worker threads. They load their modules and connect meanwhile, but follow
   * `CONTROL` (and so become ready) only once {@link streamsReady} says the streams exist.
   */
  start(): void {
    for (const s of this.slots) this.spawn(s);
  }

  /** The streams exist: the workers may follow `CONTROL` (and those spawned from now on at once). */
  streamsReady(): void {
    this.streamsChecked = true;
    for (const s of this.slots) s.worker?.postMessage({ op: 'streams-ready' } satisfies ToWorker);
  }

  /** Ends every worker thread at once, with no restart (a start-up that failed). */
  async abort(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.slots.map((s) => s.worker?.terminate()));
  }

  /** The key spaces of the re-keying hop in use: a held partition `p` runs `p~<space>` of each. */
  keySpaces(): string[] {
    return [...this.spaces].sort();
  }

  /** Per worker: its partitions and whether it is ready. */
  status(): WorkerStatus[] {
    return this.slots.map((s) => ({
      worker: s.index,
      partitions: [...s.partitions.keys()].sort((a, b) => a - b),
      starting: [...s.partitions.keys()].filter((p) => !s.started.has(p)).sort((a, b) => a - b),
      started: [...s.started.values()].sort((a, b) => a.partition - b.partition),
      ready: s.ready,
      checkpointsOk: s.checkpointsOk,
      natsConnected: s.natsConnected,
      restarts: s.restarts,
      recycles: s.recycles,
    }));
  }

  /** The partitions this process runs, sorted. */
  held(): number[] {
    return this.slots.flatMap((s) => [...s.partitions.keys()]).sort((a, b) => a - b);
  }

  /** What ownership says of this process's readiness (`/readyz`); undefined without leases. */
  ownershipStatus(): OwnershipStatus | undefined {
    return this.ownership.status();
  }

  /**
   * This process judges events now: ownership allows it (the lease store answers, and it holds a
   * partition unless its share is none), every worker caught up with CONTROL and checkpointing,
   * every partition held here running.
   */
  get ready(): boolean {
    return (
      (this.ownership.status()?.ready ?? true) &&
      this.slots.every(
        (s) =>
          s.ready && s.checkpointsOk && s.natsConnected && s.started.size === s.partitions.size,
      )
    );
  }

  /**
   * Runs partition `p` under fencing token `token` on the worker with the fewest partitions
   * (after any stop of `p` still under way, so one partition never runs twice here).
   */
  startPartition(p: number, token: number): void {
    if (this.stopping || this.slots.some((s) => s.partitions.has(p))) return;
    const slot = this.slots.reduce((a, b) => (b.partitions.size < a.partitions.size ? b : a));
    slot.partitions.set(p, token);
    const send = (): void => {
      // A thread being replaced runs no new partition: the next one starts with all of the slot's.
      if (slot.partitions.get(p) !== token || slot.recycling !== undefined) return;
      slot.worker?.postMessage({
        op: 'start-partition',
        partition: p,
        token,
      } satisfies ToWorker);
    };
    const pending = this.stopsOf(p);
    if (pending === undefined) send();
    else void pending.then(send);
  }

  /**
   * Stops partition `p`: `released` ends with a final checkpoint, `lost` stops at once. Resolves
   * when the worker has stopped it (or died).
   */
  stopPartition(p: number, reason: 'released' | 'lost'): Promise<void> {
    const slot = this.slots.find((s) => s.partitions.has(p));
    if (slot === undefined) return this.stopsOf(p) ?? Promise.resolve();
    slot.partitions.delete(p);
    this.activations.forget(p);
    slot.started.delete(p);
    let done = (): void => {};
    const promise = new Promise<void>((resolve) => (done = resolve));
    const stop: PendingStop = { slot, done, promise };
    const list = this.stops.get(p) ?? [];
    list.push(stop);
    this.stops.set(p, list);
    void promise.then(() => {
      const left = (this.stops.get(p) ?? []).filter((x) => x !== stop);
      if (left.length > 0) this.stops.set(p, left);
      else this.stops.delete(p);
    });
    if (slot.worker === undefined) done();
    else slot.worker.postMessage({ op: 'stop-partition', partition: p, reason } satisfies ToWorker);
    // Resolves once every stop of `p` asked so far is confirmed, this one included.
    return this.stopsOf(p) ?? promise;
  }

  /** Resolves when every stop of `p` under way is confirmed; undefined when none is. */
  private stopsOf(p: number): Promise<void> | undefined {
    const list = this.stops.get(p);
    return list === undefined ? undefined : Promise.all(list.map((x) => x.promise)).then(() => {});
  }

  private spawn(s: Slot): void {
    const init: WorkerInit = {
      index: s.index,
      options: this.options,
      partitions: [...s.partitions].map(([partition, token]) => ({ partition, token })),
      streamsReady: this.streamsChecked,
    };
    const w = launchWorker(init, this.options.workerYoungGenerationMb);
    s.worker = w;
    s.ready = false;
    s.checkpointsOk = true;
    s.natsConnected = true;
    s.started.clear();
    w.on('message', (m: FromWorker) => {
      if (m.op === 'ready') s.ready = true;
      else if (m.op === 'checkpoints') s.checkpointsOk = m.ok;
      else if (m.op === 'nats') s.natsConnected = m.connected;
      else if (m.op === 'partition-started') {
        const { partition, loadMs, restoreMs, consumerMs, keys } = m;
        const at = Date.now();
        if (s.partitions.has(partition))
          s.started.set(partition, { partition, at, loadMs, restoreMs, consumerMs, keys });
      } else if (m.op === 'partition-stopped') {
        // The oldest stop this worker owes for the partition.
        const stop = this.stops.get(m.partition)?.find((x) => x.slot === s);
        if (stop !== undefined) stop.done();
        else if (m.reason === 'fenced' && s.partitions.has(m.partition)) {
          s.partitions.delete(m.partition);
          this.activations.forget(m.partition);
          s.started.delete(m.partition);
          this.ownership.fenced(m.partition);
        }
      } else if (m.op === 'applied')
        this.activations.record(m.partition, m.controlSeq, m.activationMs);
      else if (m.op === 'key-space') this.spaces.add(m.space);
      else if (m.op === 'recycle') this.recycle(s, w, m.why);
      else if (m.op === 'stopped') {
        if (s.worker === w) this.retired.seen(s.index, w.threadId, m.metrics);
        if (s.recycling !== undefined) s.recycling.stopped = true;
      } else if (m.op === 'gc-pause') this.gcPauses.record(s.index, m.pause);
      else if (m.op === 'log') this.log(m.level, m.message);
      else if (m.op === 'metrics') {
        if (s.worker === w) this.retired.seen(s.index, w.threadId, m.metrics);
        this.pending.get(m.id)?.(m.metrics);
        this.pending.delete(m.id);
      }
    });
    w.on('error', (err) =>
      this.log('error', `worker ${s.index} failed: ${err.stack ?? err.message}`),
    );
    w.on('exit', (code) => {
      this.retired.retire(s.index);
      s.ready = false;
      s.worker = undefined;
      s.started.clear();
      // A dead worker runs nothing: the stops it owed are done.
      for (const list of this.stops.values())
        for (const stop of list) if (stop.slot === s) stop.done();
      const recycled = s.recycling?.stopped === true;
      s.recycling = undefined;
      if (this.stopping) return;
      if (recycled) {
        // Every partition ended with a final checkpoint and no write is left in flight: the new
        // thread may take them under the same tokens, at once.
        s.recycles++;
        this.spawn(s);
        return;
      }
      s.restarts++;
      this.log('warn', `worker ${s.index} exited (code ${code}); restarting it`);
      setTimeout(() => !this.stopping && void this.respawn(s), Math.min(5000, 250 * s.restarts));
    });
  }

  /**
   * Starts a dead worker's thread again, its partitions under new fencing tokens: a checkpoint
   * write the dead thread left on its way to Redis is then refused. Under the old token it
   * could land after the new thread's own writes and leave two numberings of lineages side by
   * side (format v5). When Redis cannot give one now, the old token is kept.
   */
  private async respawn(s: Slot): Promise<void> {
    await Promise.all(
      [...s.partitions].map(async ([p, token]) => {
        if (token === 0) return;
        const fresh = await this.ownership.reissue(p, token).catch(() => undefined);
        if (fresh !== undefined && s.partitions.get(p) === token) s.partitions.set(p, fresh);
      }),
    );
    if (!this.stopping && s.worker === undefined) this.spawn(s);
  }

  /**
   * Replaces worker thread `w` of slot `s` at its request: a clean stop (a final checkpoint of
   * every partition), then a new thread with the same partitions (on `exit`). A stop that does
   * not end in time ends the thread as a crash would, and it is restarted as one.
   */
  private recycle(s: Slot, w: Worker, why: string): void {
    if (this.stopping || s.worker !== w || s.recycling !== undefined) return;
    s.recycling = { stopped: false };
    this.log('info', `worker ${s.index}: replacing its thread, ${why}`);
    const timer = setTimeout(() => void w.terminate(), 30_000);
    w.once('exit', () => clearTimeout(timer));
    w.postMessage({ op: 'stop' } satisfies ToWorker);
  }

  /**
   * Ends a worker thread at once, as a crash would: it is restarted like a crashed one and its
   * partitions recover from their checkpoints. For tests and for operators unsticking a worker.
   */
  async terminate(index: number): Promise<void> {
    await this.slots[index]?.worker?.terminate();
  }

  /** The merged metrics of every live worker, and the counters of those that ended (see {@link RetiredMetrics}). */
  async metrics(extra: Registry[] = []): Promise<Registry> {
    const answered = new Set<number>();
    const parts = await Promise.all(
      this.slots.map(
        (s) =>
          new Promise<unknown>((resolve) => {
            const w = s.worker;
            if (w === undefined) return resolve([]);
            const id = this.nextId++;
            this.pending.set(id, (metrics) => {
              answered.add(w.threadId);
              resolve(metrics);
            });
            w.postMessage({ op: 'metrics', id } satisfies ToWorker);
            setTimeout(() => {
              if (this.pending.delete(id)) resolve([]);
            }, 5000);
          }),
      ),
    );
    const own = await Promise.all(extra.map((r) => r.getMetricsAsJSON()));
    const retired = await this.retired.parts(answered);
    return AggregatorRegistry.aggregate([...parts, ...retired, ...own] as object[]);
  }

  /**
   * Stops every worker gracefully: they finish in-flight records, flush alerts and checkpoint
   * every partition (the leases are released after that, by the lease coordinator).
   */
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
