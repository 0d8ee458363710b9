import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { ControlFollower, jetStreamControl, type ControlEvent } from '../../jetstream/index.js';
import { CONTROL_SUBJECT, Streams } from '../../protocol/index.js';
import { rekeyed, keySpaceOf, type RuleLimits, type RuleSet } from '../../rules/index.js';
import type { CheckpointStore } from '../checkpoint/checkpoint-store.js';
import { jetStreamMarkerLog, MarkerWriter } from '../control/marker-writer.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { DeadLetterSink } from '../output/sinks.js';

export interface WorkerControlDeps {
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly limits: RuleLimits;
  /** The `worker` label of this worker's metrics. */
  readonly worker: string;
  readonly metrics: WorkerMetrics;
  readonly deadLetters: DeadLetterSink;
  /** Undefined without checkpoints. */
  readonly store: CheckpointStore | undefined;
  readonly partitions: number;
  /** With the re-keying hop on: the partition key's fields (empty: none); undefined with it off. */
  readonly partitionKey: readonly string[] | undefined;
  readonly log: (level: 'warn' | 'error', message: string) => void;
}

/**
 * A worker's side of `CONTROL`: follows it, writes the marker of every accepted message into the
 * partitions run here, reports every rejected one as a dead letter, and tells the follower which
 * rule sets no partition can need any more.
 *
 * Rule sets are kept from the oldest control sequence any partition may still need: the one in
 * force on each partition run here, and for every other partition the one of its checkpoint (this
 * worker may be handed it at any time, and replays its markers from there). With the re-keying
 * hop, the key spaces' downstream partitions count too: what their sources send them names rule
 * sets no older than the one in force there.
 *
 * It also keeps the key spaces that the rule sets so far re-key to (see `rules/source-hop.ts`):
 * each needs downstream partitions, which start as their space first appears.
 */
export class WorkerControl {
  readonly follower: ControlFollower;
  /** Used only for partitions run here, i.e. once the worker is set up. */
  readonly markers: MarkerWriter;
  /** The control sequence in force on each partition run here, by `partitionLabel`. */
  private readonly applied = new Map<string, number>();
  /** The control sequence of each partition's checkpoint (by `partitionLabel`), once read. */
  private checkpointedSeqs: Map<string, number> | undefined;
  /** The key spaces rule sets so far re-key to. */
  readonly spaces = new Set<string>();
  /** Hears of each key space as it first appears. */
  onSpace: (space: string) => void = () => {};
  private readonly localSpace: string | undefined;

  constructor(private readonly d: WorkerControlDeps) {
    const pk = d.partitionKey;
    this.localSpace = pk === undefined || pk.length === 0 ? undefined : keySpaceOf(pk);
    this.markers = new MarkerWriter(jetStreamMarkerLog(d.js, d.jsm), d.log);
    this.follower = new ControlFollower(jetStreamControl(d.js, d.jsm), d.limits, (e) =>
      this.onControl(e),
    );
  }

  private async onControl(e: ControlEvent): Promise<void> {
    this.d.metrics.controlSeen.set({ worker: this.d.worker }, e.seq);
    if (!e.outcome.ok) {
      // Every worker reports the same rejection under the same id; DLQ dedupe keeps one, and
      // vigil_dlq_total counts that one.
      await this.d.deadLetters.publish({
        reason: 'invalid-control',
        data: e.data,
        message: JSON.stringify(e.outcome.problems),
        source: { stream: Streams.control, subject: CONTROL_SUBJECT, seq: e.seq },
        id: `dlq-control-${e.seq}`,
      });
      return;
    }
    this.addSpaces(e.outcome.ruleSet);
    await this.markers.accept(e.seq);
  }

  private addSpaces(rs: RuleSet): void {
    if (this.d.partitionKey === undefined) return;
    for (const rule of rs.rules.values()) {
      const space = rule.keySpace;
      if (space === undefined || this.spaces.has(space) || !rekeyed(rule, this.localSpace))
        continue;
      this.spaces.add(space);
      this.onSpace(space);
    }
  }

  /** Partition `p` (by `partitionLabel`) starts here under the rule set of `seq` (its checkpoint's, or 0). */
  started(p: string, seq: number): void {
    this.applied.set(p, seq);
  }

  /** Partition `p` (by `partitionLabel`) applied the rule set of `seq`: older rule sets may go. */
  appliedAt(p: string, seq: number): void {
    this.applied.set(p, seq);
    this.release();
  }

  /** Partition `p` (by `partitionLabel`) no longer runs here. */
  stopped(p: string): void {
    this.applied.delete(p);
  }

  /**
   * Reads the control sequence of every partition's checkpoint now, and every `intervalMs`;
   * nothing without checkpoints. Returns a stop function.
   */
  refreshCheckpointedSeqs(intervalMs: number): () => void {
    if (this.d.store === undefined) return () => {};
    const timer = setInterval(() => void this.refresh().catch(() => undefined), intervalMs);
    // Not awaited: with Redis away the worker still starts (nothing is released until it answers).
    void this.refresh().catch(() => undefined);
    return () => clearInterval(timer);
  }

  private async refresh(): Promise<void> {
    const store = this.d.store;
    if (store === undefined) return;
    // Checkpoints only move forward, so a value read earlier is a safe lower bound.
    const seqs = new Map<string, number>();
    const read = async (space: string | undefined): Promise<void> => {
      const view = space === undefined ? store : store.forSpace(space);
      (await view.loadControlSeqs(this.d.partitions)).forEach((seq, p) =>
        seqs.set(space === undefined ? String(p) : `${p}~${space}`, seq),
      );
    };
    await Promise.all([read(undefined), ...[...this.spaces].map((s) => read(s))]);
    this.checkpointedSeqs = seqs;
    this.release();
  }

  private release(): void {
    let floor = Infinity;
    if (this.d.store !== undefined) {
      if (this.checkpointedSeqs === undefined) return;
      this.checkpointedSeqs.forEach((seq, p) => {
        floor = Math.min(floor, this.applied.get(p) ?? seq);
      });
    }
    // Partitions run here count by what they have in force (a key space new since the last read too).
    for (const seq of this.applied.values()) floor = Math.min(floor, seq);
    if (Number.isFinite(floor)) this.follower.release(floor);
  }
}
