import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { VigilOptions } from '../config.js';
import type { CheckpointStore } from '../checkpoint/checkpoint-store.js';
import {
  Checkpointer,
  CheckpointLoader,
  restoreLoaded,
  type LoadedCheckpoint,
} from '../checkpoint/checkpointer.js';
import { openPartition, type RestoredPartition } from '../ingest/partition-open.js';
import { rekeyLog } from '../ingest/partition-consumer.js';
import { HopSender, inboxTransport, type HopTransport } from '../output/hop-sender.js';
import { partitionKeyFields, partitionOf } from '../../protocol/index.js';
import type { RekeyOptions } from '../../rules/index.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { Publisher } from '../output/publisher.js';
import type { AlertSink, DeadLetterSink } from '../output/sinks.js';
import { retryTransient } from '../transient.js';
import type { PartitionQueue } from './partition-queue.js';
import { PartitionRunner, partitionLabel, type PartitionRunnerDeps } from './partition-runner.js';
import type { WorkerControl } from './worker-control.js';
import type { FromWorker, PartitionGrant, PartitionStopReason } from './worker-protocol.js';
import type { EventSource } from '../ingest/event-source.js';

/** A partition this worker runs (or is starting). */
interface Owned {
  readonly partition: number;
  readonly token: number;
  runner: PartitionRunner | undefined;
  checkpointer: Checkpointer | undefined;
  /** With the re-keying hop on: where the partition's messages to the key spaces go out. */
  sender: HopSender | undefined;
  /** The key spaces' downstream partitions of the same number, run with it under its lease. */
  readonly downstreams: Map<string, Downstream>;
  /** Set the moment a stop arrives: no more markers, and a start under way gives up. */
  dropped: boolean;
}

/** A key space's downstream partition, run with the event log's partition of its number. */
interface Downstream {
  runner: PartitionRunner | undefined;
  checkpointer: Checkpointer | undefined;
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

  /** With the re-keying hop on: what a partition of the event log re-keys, and where. */
  private readonly rekey: RekeyOptions | undefined;

  constructor(private readonly d: WorkerPartitionsDeps) {
    const o = d.options;
    this.rekey =
      o.rekey === 'on'
        ? {
            partitionKey: partitionKeyFields(o.partitionKey),
            partitions: o.partitions,
            partitionOf,
            reportEveryMs: o.rekeyReportMs,
          }
        : undefined;
    // A key space that appears starts its downstream partitions beside every partition here.
    d.control.onSpace = (space) => {
      d.post({ op: 'key-space', space });
      for (const own of this.owned.values())
        d.queue.run(own.partition, () => this.startDownstream(own, space).catch(d.crash));
    };
    for (const space of d.control.spaces) d.post({ op: 'key-space', space });
    const c = d.checkpoints;
    this.checkpoints =
      c === undefined
        ? undefined
        : {
            loader: c.loader,
            restore: (loaded) =>
              this.inTurn(() =>
                restoreLoaded(c.store, loaded, (seq) => d.control.follower.ruleSetAt(seq), {
                  outOfOrderMs: o.outOfOrderMs,
                  limits: o.limits,
                  ...(this.rekey === undefined ? {} : { rekey: this.rekey }),
                }),
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

  /** The runners of the partitions run here and not stopping (the event log's). */
  runners(): PartitionRunner[] {
    return [...this.owned.values()].flatMap((x) => (x.dropped ? [] : (x.runner ?? [])));
  }

  /** The runners of the key spaces' partitions run here and not stopping. */
  downstreamRunners(): PartitionRunner[] {
    return [...this.owned.values()].flatMap((x) =>
      x.dropped ? [] : [...x.downstreams.values()].flatMap((y) => y.runner ?? []),
    );
  }

  /** The checkpointers of partition `p` and its key spaces' partitions, when it runs here and is not stopping. */
  checkpointersOf(p: number): Checkpointer[] {
    const own = this.owned.get(p);
    if (own === undefined || own.dropped) return [];
    const all = own.checkpointer === undefined ? [] : [own.checkpointer];
    for (const x of own.downstreams.values()) if (x.checkpointer) all.push(x.checkpointer);
    return all;
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
      sender: undefined,
      downstreams: new Map(),
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
    control.started(String(p), initialState?.ruleSet.controlSeq ?? 0);
    let checkpointer: Checkpointer | undefined;
    const sender =
      this.rekey === undefined
        ? undefined
        : new HopSender(this.transport(), o.maxInFlightPublishes, (subject, err) =>
            log(
              'warn',
              `partition ${p}: publish to ${subject} failed, sending again from it: ${(err as Error).message}`,
            ),
          );
    own.sender = sender;
    const runner = new PartitionRunner({
      ...this.runnerDeps(p, source),
      outOfOrderMs: o.outOfOrderMs,
      onApplied: (partition, seq, activationMs) => {
        control.appliedAt(String(partition), seq);
        d.post({ op: 'applied', partition, controlSeq: seq, activationMs });
      },
      initialState,
      admit: () => checkpointer?.admit(),
      ...(sender === undefined || this.rekey === undefined
        ? {}
        : { hop: { sender, rekey: this.rekey } }),
    });
    if (d.checkpoints !== undefined) {
      checkpointer = this.checkpointer(own, runner, d.checkpoints.store, {
        label: String(p),
        offset: restored?.offset ?? 0,
        // What the partition sent downstream is stored before its checkpoint passes it.
        settled: async () => {
          await Promise.all([d.publisher.settled(), sender?.settled()]);
        },
      });
    }
    own.runner = runner;
    own.checkpointer = checkpointer;
    runner.start();
    for (const space of control.spaces) await this.startDownstream(own, space);
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

  /** The worker's one transport of the hop's publishes (one inbox for all its partitions' acknowledgements). */
  private hopTransport: (HopTransport & { close(): void }) | undefined;
  private transport(): HopTransport {
    return (this.hopTransport ??= inboxTransport(this.d.nats.nc));
  }

  /** A write was refused because a newer owner holds the lease: stop now, without a checkpoint. */
  private fenced(own: Owned): void {
    const p = own.partition;
    if (own.dropped) return;
    own.dropped = true;
    this.d.control.markers.remove(p);
    this.d.queue.run(p, async () => {
      if (this.owned.get(p) === own) await this.stop(p, 'fenced');
    });
  }

  /**
   * Starts key space `space`'s downstream partition of `own`'s number: its consumer on
   * `rekey.<space>.<p>` and its state restored from its own checkpoint, run and checkpointed
   * under the same lease.
   */
  private async startDownstream(own: Owned, space: string): Promise<void> {
    const { d } = this;
    const { control, log } = d;
    const o = d.options;
    const p = own.partition;
    if (own.dropped || this.owned.get(p) !== own || own.downstreams.has(space)) return;
    const entry: Downstream = { runner: undefined, checkpointer: undefined };
    own.downstreams.set(space, entry);
    const label = partitionLabel(p, space);
    const store = d.checkpoints?.store.forSpace(space);
    const checkpoints =
      store === undefined
        ? undefined
        : {
            loader: new CheckpointLoader(store, 1),
            restore: (loaded: LoadedCheckpoint) =>
              this.inTurn(() =>
                restoreLoaded(store, loaded, (seq) => control.follower.ruleSetAt(seq), {
                  outOfOrderMs: 0,
                  limits: o.limits,
                }),
              ),
          };
    const opened = await retryTransient(
      () =>
        openPartition({
          partition: p,
          nats: d.nats,
          checkpoints,
          dropped: () => own.dropped,
          log: rekeyLog(space, p),
        }),
      {
        abandoned: () => own.dropped,
        onRetry: (err, n, delayMs) =>
          log(
            'warn',
            `partition ${p} of key space ${space}: opening it failed (${err.name}: ${err.message}, attempt ${n}); trying again in ${delayMs} ms`,
          ),
      },
    );
    if (opened === undefined) return;
    const { source, restored } = opened;
    if (own.dropped) {
      await source.stop();
      return;
    }
    control.started(label, restored?.state.ruleSet.controlSeq ?? 0);
    let checkpointer: Checkpointer | undefined;
    const runner = new PartitionRunner({
      ...this.runnerDeps(p, source),
      outOfOrderMs: 0,
      onApplied: (_, seq) => control.appliedAt(label, seq),
      initialState: restored?.state,
      admit: () => checkpointer?.admit(),
      downstream: { space },
    });
    if (store !== undefined)
      checkpointer = this.checkpointer(own, runner, store, {
        label,
        offset: restored?.offset ?? 0,
        settled: () => d.publisher.settled(),
      });
    entry.runner = runner;
    entry.checkpointer = checkpointer;
    runner.start();
    if (restored)
      log(
        'info',
        `partition ${p} of key space ${space} restored at offset ${restored.offset}: ${restored.timings.keys} keys`,
      );
  }

  /** What every partition runner here is given (of the event log or a key space's). */
  private runnerDeps(
    partition: number,
    source: EventSource,
  ): Omit<PartitionRunnerDeps, 'outOfOrderMs' | 'onApplied'> {
    const { d } = this;
    return {
      partition,
      partitions: d.options.partitions,
      limits: d.options.limits,
      source,
      control: d.control.follower,
      alerts: d.alerts,
      deadLetters: d.deadLetters,
      metrics: d.metrics,
      onRuleError: d.onRuleError,
    };
  }

  /** The checkpointer of a partition (of the event log or a key space's) run under `own`'s lease. */
  private checkpointer(
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
        onFenced: () => this.fenced(own),
        maxUncheckpointed: o.maxUncheckpointedRecords,
        timeoutMs: Math.max(2000, 5 * o.checkpointIntervalMs),
        fullEvery: o.checkpointFullEvery,
        savedRuleSets: this.savedRuleSets,
        log: this.d.log,
      },
      c.offset,
    );
  }

  /** Stops a partition's runner: with a final checkpoint when handed over, else at once. */
  private async stopRunner(
    x: { runner: PartitionRunner | undefined; checkpointer: Checkpointer | undefined },
    reason: PartitionStopReason,
  ): Promise<boolean> {
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

  /** Stops partition `p`: handed over (`released`, with a final checkpoint) or lost. */
  async stop(p: number, reason: PartitionStopReason): Promise<void> {
    const { metrics } = this.d;
    const own = this.owned.get(p);
    let checkpointed = false;
    if (own !== undefined) {
      own.dropped = true;
      this.d.control.markers.remove(p);
      // The event log's partition first: its final checkpoint waits for what it sent downstream.
      checkpointed = await this.stopRunner(own, reason);
      if (reason !== 'released') own.sender?.close();
      const labels = [String(p)];
      for (const [space, x] of own.downstreams) {
        checkpointed = (await this.stopRunner(x, reason)) && checkpointed;
        const label = partitionLabel(p, space);
        this.d.control.stopped(label);
        labels.push(label);
      }
      this.owned.delete(p);
      this.d.control.stopped(String(p));
      for (const partition of labels)
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
