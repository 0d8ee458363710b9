import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { VigilOptions } from '../config.js';
import type { CheckpointStore } from '../checkpoint/checkpoint-store.js';
import {
  Checkpointer,
  restoreLoaded,
  type CheckpointLoader,
  type LoadedCheckpoint,
} from '../checkpoint/checkpointer.js';
import { openPartition, type RestoredPartition } from '../ingest/partition-open.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { Publisher } from '../output/publisher.js';
import type { AlertSink, DeadLetterSink } from '../output/sinks.js';
import { retryTransient } from '../transient.js';
import type { PartitionQueue } from './partition-queue.js';
import { PartitionRunner, type PartitionRunnerDeps } from './partition-runner.js';
import type { WorkerControl } from './worker-control.js';
import type { FromWorker, PartitionGrant, PartitionStopReason } from './worker-protocol.js';

/** A partition this worker runs (or is starting). */
interface Owned {
  readonly partition: number;
  readonly token: number;
  runner: PartitionRunner | undefined;
  checkpointer: Checkpointer | undefined;
  /** Set the moment a stop arrives: no more markers, and a start under way gives up. */
  dropped: boolean;
}

export interface WorkerPartitionsDeps {
  /** The `worker` label of this worker's metrics. */
  readonly worker: string;
  readonly options: VigilOptions;
  readonly nats: { readonly nc: NatsConnection; readonly jsm: JetStreamManager };
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
  readonly log: (level: 'info' | 'warn' | 'error', message: string) => void;
}

/**
 * The partitions a worker runs: opens each (consumer and restored state), runs it with its
 * checkpointer, and stops it, with a final checkpoint when it is handed over. The caller runs
 * `start` and `stop` of one partition through the {@link PartitionQueue}, one after another.
 */
export class WorkerPartitions {
  private readonly owned = new Map<number, Owned>();
  /** Rule sets saved to the store, shared by the partitions' checkpointers. */
  private readonly savedRuleSets = new Map<number, Promise<void>>();
  private restoring = Promise.resolve();
  /** How a partition being opened reads its checkpoint; undefined without checkpoints. */
  private readonly checkpoints:
    | {
        readonly loader: CheckpointLoader;
        readonly restore: (loaded: LoadedCheckpoint) => Promise<RestoredPartition>;
      }
    | undefined;

  constructor(private readonly d: WorkerPartitionsDeps) {
    const c = d.checkpoints;
    this.checkpoints =
      c === undefined
        ? undefined
        : {
            loader: c.loader,
            restore: (loaded) =>
              this.inTurn(() =>
                restoreLoaded(
                  c.store,
                  loaded,
                  (seq) => d.control.follower.ruleSetAt(seq),
                  d.options,
                ),
              ),
          };
  }

  /** Whether partition `p` is run (or starting) here. */
  has(p: number): boolean {
    return this.owned.has(p);
  }

  /** The partitions run (or starting) here. */
  partitions(): number[] {
    return [...this.owned.keys()];
  }

  /** The runners of the partitions run here and not stopping. */
  runners(): PartitionRunner[] {
    return [...this.owned.values()].flatMap((x) => (x.dropped ? [] : (x.runner ?? [])));
  }

  /** The checkpointer of partition `p` when it runs here and is not stopping. */
  checkpointerOf(p: number): Checkpointer | undefined {
    const own = this.owned.get(p);
    return own === undefined || own.dropped ? undefined : own.checkpointer;
  }

  /**
   * A stop of `p` has arrived: from now on no more markers, and a start under way gives up. The
   * stop itself runs in its turn.
   */
  drop(p: number): void {
    const own = this.owned.get(p);
    if (own) {
      own.dropped = true;
      this.d.control.markers.remove(p);
    }
  }

  /**
   * Restores hold the thread for a while each: one at a time, with a turn of the event loop
   * between two (immediates queued together run back to back, without reading any socket), so
   * that the replies to the consumers being created, and to Redis, are read in between.
   */
  private async inTurn<T>(fn: () => Promise<T>): Promise<T> {
    const previous = this.restoring;
    let done = (): void => {};
    this.restoring = new Promise<void>((r) => (done = r));
    try {
      await previous;
      await new Promise((r) => setImmediate(r));
      return await fn();
    } finally {
      done();
    }
  }

  private leased(): number {
    return [...this.owned.values()].filter((x) => x.token > 0 && x.runner).length;
  }

  /** Opens partition `p` and starts running it; `handedOver` when it came from another owner. */
  async start(grant: PartitionGrant, handedOver: boolean): Promise<void> {
    const { d } = this;
    const { control, metrics, log } = d;
    const o = d.options;
    const p = grant.partition;
    if (this.owned.has(p)) return;
    const own: Owned = {
      partition: p,
      token: grant.token,
      runner: undefined,
      checkpointer: undefined,
      dropped: false,
    };
    this.owned.set(p, own);
    void control.markers.add(p, () => this.owned.get(p) === own && !own.dropped);
    const restoreStarted = performance.now();
    const checkpoints = this.checkpoints;
    // A JetStream API call that times out on a saturated machine is tried again here: crashing
    // the thread would re-create every partition's consumer, more load on the same server.
    const opened = await retryTransient(
      () => openPartition({ partition: p, nats: d.nats, checkpoints, dropped: () => own.dropped }),
      {
        abandoned: () => own.dropped,
        onRetry: (err, n, delayMs) =>
          log(
            'warn',
            `partition ${p}: opening it failed (${err.name}: ${err.message}, attempt ${n}); trying again in ${delayMs} ms`,
          ),
      },
    );
    if (opened === undefined) return;
    const { source, restored, consumerMs } = opened;
    const initialState = restored?.state;
    if (restored)
      log(
        'info',
        `partition ${p} restored at offset ${restored.offset}, control sequence ${initialState?.ruleSet.controlSeq}: ${restored.timings.keys} keys, ${Math.round(restored.timings.loadMs)} ms reading, ${Math.round(restored.timings.restoreMs)} ms restoring, ${Math.round(performance.now() - restoreStarted)} ms in all`,
      );
    if (own.dropped) {
      await source.stop();
      return;
    }
    control.started(p, initialState?.ruleSet.controlSeq ?? 0);
    let checkpointer: Checkpointer | undefined;
    const runner = new PartitionRunner({
      partition: p,
      partitions: o.partitions,
      outOfOrderMs: o.outOfOrderMs,
      limits: o.limits,
      source,
      control: control.follower,
      alerts: d.alerts,
      deadLetters: d.deadLetters,
      metrics,
      onRuleError: d.onRuleError,
      onApplied: (partition, seq, activationMs) => {
        control.appliedAt(partition, seq);
        d.post({ op: 'applied', partition, controlSeq: seq, activationMs });
      },
      initialState,
      admit: () => checkpointer?.admit(),
    });
    if (d.checkpoints !== undefined) {
      checkpointer = new Checkpointer(
        () => runner.state,
        (fn) => runner.atBoundary(fn),
        {
          partition: p,
          store: d.checkpoints.store,
          metrics,
          settled: () => d.publisher.settled(),
          fence: () => own.token,
          onFenced: () => {
            // A newer owner holds the lease: stop now, without a checkpoint.
            if (own.dropped) return;
            own.dropped = true;
            control.markers.remove(p);
            d.queue.run(p, async () => {
              if (this.owned.get(p) === own) await this.stop(p, 'fenced');
            });
          },
          maxUncheckpointed: o.maxUncheckpointedRecords,
          timeoutMs: Math.max(2000, 5 * o.checkpointIntervalMs),
          fullEvery: o.checkpointFullEvery,
          savedRuleSets: this.savedRuleSets,
          log,
        },
        restored?.offset ?? 0,
      );
    }
    own.runner = runner;
    own.checkpointer = checkpointer;
    runner.start();
    if (own.token > 0) {
      metrics.leasesHeld.set({ worker: d.worker }, this.leased());
      if (handedOver) metrics.leaseHandoffs.inc({ reason: 'acquired' });
    }
    d.post({
      op: 'partition-started',
      partition: p,
      loadMs: restored?.timings.loadMs ?? 0,
      restoreMs: restored?.timings.restoreMs ?? 0,
      consumerMs,
      keys: restored?.timings.keys ?? 0,
    });
  }

  /** Stops partition `p`: handed over (`released`, with a final checkpoint) or lost. */
  async stop(p: number, reason: PartitionStopReason): Promise<void> {
    const { metrics } = this.d;
    const own = this.owned.get(p);
    let checkpointed = false;
    if (own !== undefined) {
      own.dropped = true;
      this.d.control.markers.remove(p);
      if (reason === 'released') {
        // Stop reading, finish the record in flight, then a final checkpoint (it waits for
        // every alert to be acknowledged) so that the next owner replays nothing.
        own.checkpointer?.drain();
        await own.runner?.stop();
        // A periodic checkpoint under way may have been taken before the last records: a
        // second one covers them (and costs nothing when there is nothing new).
        await own.checkpointer?.checkpoint();
        checkpointed = (await own.checkpointer?.checkpoint()) ?? own.runner !== undefined;
        await own.checkpointer?.close();
      } else {
        // The lease is gone: no more records, alerts, markers or checkpoints from here. Closing
        // the checkpointer first also lets a partition held back by backpressure stop.
        const closing = own.checkpointer?.close();
        await own.runner?.stop();
        await closing;
      }
      this.owned.delete(p);
      this.d.control.stopped(p);
      const partition = String(p);
      for (const g of [
        metrics.offset,
        metrics.lag,
        metrics.watermarkLag,
        metrics.liveKeys,
        metrics.liveStates,
        metrics.controlApplied,
        metrics.checkpointLast,
        metrics.checkpointOffset,
      ])
        g.remove({ partition });
      if (own.token > 0) {
        metrics.leasesHeld.set({ worker: this.d.worker }, this.leased());
        metrics.leaseHandoffs.inc({ reason: reason === 'released' ? 'released' : 'lost' });
      }
      this.d.log('info', `partition ${p} stopped (${reason})`);
    }
    this.d.post({ op: 'partition-stopped', partition: p, reason, checkpointed });
  }
}
