import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import type { VigilOptions } from '../config.js';
import { partitionKeyFields } from '../../protocol/index.js';
import { GC_REPORT_MS, watchGcPauses } from '../metrics/gc-pauses.js';
import { WorkerMetrics } from '../metrics/metrics.js';
import { registerThreadCpu } from '../metrics/thread-cpu.js';
import { RedisCheckpointStore } from '../checkpoint/checkpoint-store.js';
import { CheckpointLoader, startCheckpointTurns } from '../checkpoint/checkpointer.js';
import { Publisher } from '../output/publisher.js';
import { natsAlertSink, natsDeadLetterSink } from '../output/sinks.js';
import { RuleQuarantine } from '../control/quarantine.js';
import { startIdleTicks } from '../ingest/idle-ticks.js';
import { startIdleGc } from './idle-gc.js';
import { PartitionQueue } from './partition-queue.js';
import { WorkerControl } from './worker-control.js';
import { connectWorker, type WorkerNats } from './worker-nats.js';
import { WorkerPartitions } from './worker-partitions.js';
import type { FromWorker, ToWorker, WorkerInit } from './worker-protocol.js';

/** How long every partition of a worker must have read nothing before it collects its heap after expiry. */
const IDLE_GC_MS = 3000;

/** What a worker runs once it is connected and caught up with `CONTROL`. */
interface Running {
  readonly nats: WorkerNats;
  readonly control: WorkerControl;
  readonly publisher: Publisher;
  readonly partitions: WorkerPartitions;
  /** Stops the periodic work: checkpoint turns, idle ticks, idle collections. */
  readonly stopTimers: () => void;
}

/**
 * One worker thread: connects to NATS, follows `CONTROL`, runs the partitions the pool hands it
 * and answers the pool's messages. It listens from the start: the pool may send partitions while
 * the worker is still connecting, and they wait for it to be set up.
 */
class WorkerThread {
  private readonly o: VigilOptions;
  /** The `worker` label of the metrics. */
  private readonly w: string;
  private readonly metrics = new WorkerMetrics();
  private readonly stopWatchingGc: () => void;
  /** Starts and stops of one partition run in the order they arrive; partitions run side by side. */
  private readonly queue: PartitionQueue;
  private readonly store: RedisCheckpointStore | undefined;
  private readonly loader: CheckpointLoader | undefined;
  private streamsChecked = (): void => {};
  private readonly streams: Promise<void>;
  private resolveReady: (r: Running) => void = () => {};
  private readonly ready: Promise<Running>;
  /** Set when `ready` resolves. */
  private running: Running | undefined;
  private stopping: Promise<void> | undefined;

  constructor(
    private readonly init: WorkerInit,
    private readonly port: MessagePort,
  ) {
    this.o = init.options;
    this.w = String(init.index);
    this.metrics.ready.set({ worker: this.w }, 0);
    this.metrics.leasesHeld.set({ worker: this.w }, 0);
    registerThreadCpu(this.metrics.registry, this.w);
    this.stopWatchingGc = watchGcPauses((pause) => {
      this.metrics.gcPause.observe({ worker: this.w, kind: pause.kind }, pause.ms / 1000);
      if (pause.ms >= GC_REPORT_MS) this.post({ op: 'gc-pause', pause });
    });
    this.queue = new PartitionQueue(this.log);
    this.store =
      this.o.checkpointIntervalMs > 0 ? new RedisCheckpointStore(this.o.redisUrl) : undefined;
    // Checkpoints are read from the moment a partition arrives: at start-up while the worker
    // still connects to NATS and catches up with CONTROL, and while other partitions restore.
    this.loader = this.store === undefined ? undefined : new CheckpointLoader(this.store);
    for (const grant of init.partitions) this.loader?.prefetch(grant.partition);
    this.streams = init.streamsReady
      ? Promise.resolve()
      : new Promise<void>((resolve) => (this.streamsChecked = resolve));
    this.ready = new Promise<Running>((resolve) => (this.resolveReady = resolve));
    port.on('message', (m: ToWorker) => this.onMessage(m));
  }

  private readonly post = (m: FromWorker): void => this.port.postMessage(m);

  private readonly log = (level: 'info' | 'warn' | 'error', message: string): void =>
    this.post({ op: 'log', level, message: `worker ${this.init.index}: ${message}` });

  /**
   * A partition that cannot start would be held and never run: end the thread, as a crash
   * would; the pool restarts it and the restore is tried again.
   */
  private readonly crash = (err: unknown): void => {
    setImmediate(() => {
      throw err;
    });
  };

  private onMessage(m: ToWorker): void {
    if (m.op === 'metrics') {
      void this.metrics.registry
        .getMetricsAsJSON()
        .then((json) => this.post({ op: 'metrics', id: m.id, metrics: json }));
    } else if (m.op === 'start-partition') {
      // A stopping thread takes no new partition: the pool gives it to the next thread.
      if (this.stopping !== undefined) return;
      // Only with nothing under way for the partition: a stop before this start would write a
      // final checkpoint after the read.
      if (!this.queue.has(m.partition) && !(this.running?.partitions.has(m.partition) ?? false))
        this.loader?.prefetch(m.partition);
      this.queue.run(m.partition, async () => {
        const r = await this.ready;
        await r.partitions.start(m, true).catch(this.crash);
      });
    } else if (m.op === 'stop-partition') {
      this.loader?.forget(m.partition);
      this.running?.partitions.drop(m.partition);
      this.queue.run(m.partition, async () => {
        const r = await this.ready;
        await r.partitions.stop(m.partition, m.reason);
      });
    } else if (m.op === 'streams-ready') this.streamsChecked();
    else if (m.op === 'stop') this.stopping ??= this.ready.then((r) => this.stopAll(r));
  }

  /** Connects, catches up with `CONTROL`, starts the partitions it was started with, and says it is ready. */
  async setUp(): Promise<void> {
    const { o, metrics, w, log } = this;
    const nats = await connectWorker(this.init.index, o, log, (connected) =>
      this.post({ op: 'nats', connected }),
    );
    const publisher = new Publisher(nats.js, o.maxInFlightPublishes, (subject, err) =>
      log('warn', `publish to ${subject} failed, retrying: ${(err as Error).message}`),
    );
    const alerts = natsAlertSink(publisher);
    const deadLetters = natsDeadLetterSink(publisher, (reason) => metrics.dlq.inc({ reason }));
    const control = new WorkerControl({
      js: nats.js,
      jsm: nats.jsm,
      limits: o.limits,
      worker: w,
      metrics,
      deadLetters,
      store: this.store,
      partitions: o.partitions,
      partitionKey: o.rekey === 'on' ? partitionKeyFields(o.partitionKey) : undefined,
      log,
    });
    const { onRuleError } = new RuleQuarantine(nats.js, o.quarantineAfterErrors, metrics, log);

    await this.streams;
    await control.follower.start();
    const partitions = new WorkerPartitions({
      worker: w,
      options: o,
      nats,
      control,
      checkpoints:
        this.store === undefined || this.loader === undefined
          ? undefined
          : { store: this.store, loader: this.loader },
      publisher,
      alerts,
      deadLetters,
      metrics,
      onRuleError,
      queue: this.queue,
      post: this.post,
      crash: this.crash,
      log,
    });
    const stopTimers = this.startTimers(nats, control, partitions);
    this.running = { nats, control, publisher, partitions, stopTimers };
    for (const grant of this.init.partitions)
      this.queue.run(grant.partition, () => partitions.start(grant, false).catch(this.crash));
    metrics.ready.set({ worker: w }, 1);
    this.post({ op: 'ready' });
    this.resolveReady(this.running);
  }

  /** Checkpoint turns, idle ticks and idle collections; returns the function that stops them. */
  private startTimers(
    nats: WorkerNats,
    control: WorkerControl,
    partitions: WorkerPartitions,
  ): () => void {
    const o = this.o;
    const stopCheckpoints =
      this.store === undefined
        ? () => {}
        : startCheckpointTurns({
            intervalMs: o.checkpointIntervalMs,
            partitions: o.partitions,
            checkpointersOf: (p) => partitions.checkpointersOf(p),
            onHealth: (ok) => this.post({ op: 'checkpoints', ok }),
          });
    const stopSeqs = control.refreshCheckpointedSeqs(Math.max(5000, o.checkpointIntervalMs));
    const stopTicks = startIdleTicks({
      intervalMs: o.tickIntervalMs,
      js: nats.js,
      runners: () => partitions.runners(),
      log: this.log,
    });
    const stopIdleGc = startIdleGc({
      idleMs: IDLE_GC_MS,
      runners: () => partitions.runners(),
      log: this.log,
      // A new thread's partitions restore from checkpoints: without them there is nothing to restore.
      recycleSlackBytes: this.store === undefined ? 0 : o.workerRecycleSlackMb * 1e6,
      recycle: (why) => this.post({ op: 'recycle', why }),
    });
    return () => {
      stopTicks();
      stopIdleGc();
      stopCheckpoints();
      stopSeqs();
    };
  }

  /** A clean stop: a last checkpoint of every partition, so the next owner replays nothing. */
  private async stopAll(r: Running): Promise<void> {
    r.stopTimers();
    r.nats.unwatch();
    this.metrics.ready.set({ worker: this.w }, 0);
    await Promise.all(
      r.partitions.partitions().map(
        (p) =>
          new Promise<void>((resolve) =>
            this.queue.run(p, async () => {
              await r.partitions.stop(p, 'released');
              resolve();
            }),
          ),
      ),
    );
    await this.queue.settled();
    // Every partition stopped after its hop messages were stored: nothing is left to acknowledge.
    r.partitions.close();
    await this.store?.close();
    await r.control.follower.stop();
    await r.publisher.flush();
    await r.nats.nc.drain();
    this.stopWatchingGc();
    this.post({ op: 'stopped', metrics: await this.metrics.registry.getMetricsAsJSON() });
    this.port.close();
  }
}

async function main(init: WorkerInit): Promise<void> {
  if (parentPort === null) throw new Error('worker.ts runs in a worker thread');
  await new WorkerThread(init, parentPort).setUp();
}

main(workerData as WorkerInit).catch((err: unknown) => {
  // Let the main thread see the failure as a worker error and restart the worker.
  throw err;
});
