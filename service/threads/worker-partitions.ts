import type { Checkpointer } from '../checkpoint/checkpointer.js';
import { HopSender, inboxTransport, type HopTransport } from '../output/hop-sender.js';
import { partitionKeyFields, partitionOf } from '../../protocol/index.js';
import type { RekeyOptions } from '../../rules/index.js';
import { KeySpacePartitions } from './key-space-partitions.js';
import type { PartitionRunner } from './partition-runner.js';
import {
  PartitionParts,
  stopPart,
  type Owned,
  type Restoring,
  type WorkerPartitionsDeps,
} from './partition-parts.js';
import type { PartitionGrant, PartitionStopReason } from './worker-protocol.js';

export type { WorkerPartitionsDeps } from './partition-parts.js';

/**
 * The partitions a worker runs: opens each (consumer and restored state), runs it with its
 * checkpointer, and stops it, with a final checkpoint when it is handed over. The caller runs
 * `start` and `stop` of one partition through the {@link PartitionQueue}, one after another.
 */
export class WorkerPartitions {
  private readonly owned = new Map<number, Owned>();
  private readonly parts: PartitionParts;
  private readonly keySpaces: KeySpacePartitions;
  /** How a partition being opened reads its checkpoint; undefined without checkpoints. */
  private readonly checkpoints: Restoring | undefined;

  /** With the re-keying hop on: what a partition of the event log re-keys, and where. */
  private readonly rekey: RekeyOptions | undefined;

  constructor(private readonly d: WorkerPartitionsDeps) {
    const o = d.options;
    this.parts = new PartitionParts(d, (own) => this.fenced(own));
    this.keySpaces = new KeySpacePartitions(this.parts);
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
        : this.parts.restoring(c.store, c.loader, {
            outOfOrderMs: o.outOfOrderMs,
            limits: o.limits,
            ...(this.rekey === undefined ? {} : { rekey: this.rekey }),
          });
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
    const opened = await this.parts.open(own, `partition ${p}`, this.checkpoints);
    if (opened === undefined) return;
    const { source, restored, consumerMs } = opened;
    const initialState = restored?.state;
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
    const runner = this.parts.runner(p, source, {
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
      checkpointer = this.parts.checkpointer(own, runner, d.checkpoints.store, {
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

  /** Once every partition has stopped: ends the hop's inbox subscription and its time-out sweep. */
  close(): void {
    this.hopTransport?.close();
    this.hopTransport = undefined;
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

  /** Starts key space `space`'s partition of `own`'s number, while `own` is current. */
  private startDownstream(own: Owned, space: string): Promise<void> {
    return this.keySpaces.start(own, space, () => this.owned.get(own.partition) === own);
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
      checkpointed = await stopPart(own, reason);
      // Handed over, what it sent goes out first (its final checkpoint waited for it already,
      // when there are checkpoints); then the sender stops, tries nothing again.
      if (reason === 'released') await own.sender?.settled();
      own.sender?.close();
      const spaces = await this.keySpaces.stop(own, reason);
      checkpointed &&= spaces.checkpointed;
      const labels = [String(p), ...spaces.labels];
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
