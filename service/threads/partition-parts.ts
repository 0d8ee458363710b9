import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { VigilOptions } from '../config.js';
import type { CheckpointStore } from '../checkpoint/checkpoint-store.js';
import {
  Checkpointer,
  restoreLoaded,
  type CheckpointLoader,
  type LoadedCheckpoint,
} from '../checkpoint/checkpointer.js';
import type { EventSource } from '../ingest/event-source.js';
import type { LogSpec } from '../ingest/partition-consumer.js';
import {
  openPartition,
  type OpenedPartition,
  type RestoredPartition,
} from '../ingest/partition-open.js';
import { retryTransient } from '../transient.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { HopSender } from '../output/hop-sender.js';
import type { Publisher } from '../output/publisher.js';
import type { AlertSink, DeadLetterSink } from '../output/sinks.js';
import type { PartitionQueue } from './partition-queue.js';
import { PartitionRunner, type PartitionRunnerDeps } from './partition-runner.js';
import type { WorkerControl } from './worker-control.js';
import type { FromWorker, PartitionStopReason } from './worker-protocol.js';

/**
 * What a worker's partitions are made of, of the event log and of the key spaces alike: a runner
 * and its checkpointer, built here from the worker's shared parts, and stopped here.
 */

/** A runner and its checkpointer (undefined until started; the checkpointer without checkpoints). */
export interface RunningPart {
  runner: PartitionRunner | undefined;
  checkpointer: Checkpointer | undefined;
}

/** A partition this worker runs (or is starting). */
export interface Owned extends RunningPart {
  readonly partition: number;
  readonly token: number;
  /** With the re-keying hop on: where the partition's messages to the key spaces go out. */
  sender: HopSender | undefined;
  /** The key spaces' downstream partitions of the same number, run with it under its lease. */
  readonly downstreams: Map<string, RunningPart>;
  /** Set the moment a stop arrives: no more markers, and a start under way gives up. */
  dropped: boolean;
}

export interface WorkerPartitionsDeps {
  /** The `worker` label of this worker's metrics. */
  readonly worker: string;
  readonly options: VigilOptions;
  readonly nats: {
    readonly nc: NatsConnection;
    readonly js: JetStreamClient;
    readonly jsm: JetStreamManager;
  };
  readonly control: WorkerControl;
  /** Undefined without checkpoints. */
  readonly checkpoints:
    { readonly store: CheckpointStore; readonly loader: CheckpointLoader } | undefined;
  readonly publisher: Publisher;
  readonly alerts: AlertSink;
  readonly deadLetters: DeadLetterSink;
  readonly metrics: WorkerMetrics;
  readonly onRuleError: PartitionRunnerDeps['onRuleError'];
  /** Where the starts and stops of each partition take their turn. */
  readonly queue: PartitionQueue;
  readonly post: (m: FromWorker) => void;
  /** Ends the thread on a failure nothing here can handle (the pool restarts it). */
  readonly crash: (err: unknown) => void;
  readonly log: (level: 'info' | 'warn' | 'error', message: string) => void;
}

/** How a partition being opened reads its checkpoint (see {@link PartitionParts.restoring}). */
export interface Restoring {
  readonly loader: CheckpointLoader;
  readonly restore: (loaded: LoadedCheckpoint) => Promise<RestoredPartition>;
}

/** What every runner of a worker is given alike. */
type Shared =
  'partitions' | 'limits' | 'control' | 'alerts' | 'deadLetters' | 'metrics' | 'onRuleError';

/** Builds the runners and checkpointers of a worker's partitions from its shared parts. */
export class PartitionParts {
  /** Rule sets saved to the store, shared by the partitions' checkpointers. */
  private readonly savedRuleSets = new Map<number, Promise<void>>();
  /** The restore in turn last (see {@link inTurn}). */
  private lastRestore = Promise.resolve();

  constructor(
    readonly d: WorkerPartitionsDeps,
    /** A write of `own`'s was refused because a newer owner holds its lease. */
    private readonly onFenced: (own: Owned) => void,
  ) {}

  /**
   * How a partition whose checkpoint is in `store` reads it: through `loader`, rebuilt in turn
   * with the rule sets of this worker's CONTROL follower.
   */
  restoring(
    store: CheckpointStore,
    loader: CheckpointLoader,
    options: Parameters<typeof restoreLoaded>[3],
  ): Restoring {
    return {
      loader,
      restore: (loaded) =>
        this.inTurn(() =>
          restoreLoaded(store, loaded, (seq) => this.d.control.follower.ruleSetAt(seq), options),
        ),
    };
  }

  /**
   * Restores hold the thread for a while each: one at a time, with a turn of the event loop
   * between two (immediates queued together run back to back, without reading any socket), so
   * that the replies to the consumers being created, and to Redis, are read in between.
   */
  private async inTurn<T>(fn: () => Promise<T>): Promise<T> {
    const previous = this.lastRestore;
    let done = (): void => {};
    this.lastRestore = new Promise<void>((r) => (done = r));
    try {
      await previous;
      await new Promise((r) => setImmediate(r));
      return await fn();
    } finally {
      done();
    }
  }

  /**
   * Opens `own`'s partition on `log` (the event log's unless given), named `name` in log lines:
   * its consumer and restored state. A JetStream API call that times out on a saturated machine
   * is tried again here: crashing the thread would re-create every partition's consumer, more load
   * on the same server. Undefined, with nothing left open, when `own` is dropped meanwhile.
   */
  async open(
    own: Owned,
    name: string,
    checkpoints: Restoring | undefined,
    log?: LogSpec,
  ): Promise<OpenedPartition | undefined> {
    const started = performance.now();
    const opened = await retryTransient(
      () =>
        openPartition({
          partition: own.partition,
          nats: this.d.nats,
          checkpoints,
          dropped: () => own.dropped,
          ...(log === undefined ? {} : { log }),
        }),
      {
        abandoned: () => own.dropped,
        onRetry: (err, n, delayMs) =>
          this.d.log(
            'warn',
            `${name}: opening it failed (${err.name}: ${err.message}, attempt ${n}); trying again in ${delayMs} ms`,
          ),
      },
    );
    if (opened === undefined) return undefined;
    const r = opened.restored;
    if (r)
      this.d.log(
        'info',
        `${name} restored at offset ${r.offset}, control sequence ${r.state.ruleSet.controlSeq}: ${r.timings.keys} keys, ${Math.round(r.timings.loadMs)} ms reading, ${Math.round(r.timings.restoreMs)} ms restoring, ${Math.round(performance.now() - started)} ms in all`,
      );
    if (own.dropped) {
      await opened.source.stop();
      return undefined;
    }
    return opened;
  }

  /** A runner of partition `partition` (of the event log or a key space's) reading `source`. */
  runner(
    partition: number,
    source: EventSource,
    own: Omit<PartitionRunnerDeps, Shared | 'partition' | 'source'>,
  ): PartitionRunner {
    const { d } = this;
    const shared: Pick<PartitionRunnerDeps, Shared> = {
      partitions: d.options.partitions,
      limits: d.options.limits,
      control: d.control.follower,
      alerts: d.alerts,
      deadLetters: d.deadLetters,
      metrics: d.metrics,
      onRuleError: d.onRuleError,
    };
    return new PartitionRunner({ ...shared, partition, source, ...own });
  }

  /** The checkpointer of a partition (of the event log or a key space's) run under `own`'s lease. */
  checkpointer(
    own: Owned,
    runner: PartitionRunner,
    store: CheckpointStore,
    c: { label: string; offset: number; settled: () => Promise<void> },
  ): Checkpointer {
    const o = this.d.options;
    return new Checkpointer(
      () => runner.state,
      (fn) => runner.atBoundary(fn),
      {
        partition: own.partition,
        label: c.label,
        store,
        metrics: this.d.metrics,
        settled: c.settled,
        fence: () => own.token,
        onFenced: () => this.onFenced(own),
        maxUncheckpointed: o.maxUncheckpointedRecords,
        timeoutMs: Math.max(2000, 5 * o.checkpointIntervalMs),
        fullEvery: o.checkpointFullEvery,
        savedRuleSets: this.savedRuleSets,
        log: this.d.log,
      },
      c.offset,
    );
  }
}

/** Stops a partition's runner: with a final checkpoint when handed over, else at once. */
export async function stopPart(x: RunningPart, reason: PartitionStopReason): Promise<boolean> {
  if (reason === 'released') {
    // Stop reading, finish the record in flight, then a final checkpoint (it waits for
    // every alert to be acknowledged) so that the next owner replays nothing.
    x.checkpointer?.drain();
    await x.runner?.stop();
    // A periodic checkpoint under way may have been taken before the last records: a
    // second one covers them (and costs nothing when there is nothing new).
    await x.checkpointer?.checkpoint();
    const checkpointed = (await x.checkpointer?.checkpoint()) ?? x.runner !== undefined;
    await x.checkpointer?.close();
    return checkpointed;
  }
  // The lease is gone: no more records, alerts, markers or checkpoints from here. Closing
  // the checkpointer first also lets a partition held back by backpressure stop.
  const closing = x.checkpointer?.close();
  await x.runner?.stop();
  await closing;
  return false;
}
