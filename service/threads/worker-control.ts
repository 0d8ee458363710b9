import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { ControlFollower, jetStreamControl, type ControlEvent } from '../../jetstream/index.js';
import { CONTROL_SUBJECT, Streams } from '../../protocol/index.js';
import type { RuleLimits } from '../../rules/index.js';
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
  readonly log: (level: 'warn' | 'error', message: string) => void;
}

/**
 * A worker's side of `CONTROL`: follows it, writes the marker of every accepted message into the
 * partitions run here, reports every rejected one as a dead letter, and tells the follower which
 * rule sets no partition can need any more.
 *
 * Rule sets are kept from the oldest control sequence any partition may still need: the one in
 * force on each partition run here, and for every other partition the one of its checkpoint (this
 * worker may be handed it at any time, and replays its markers from there).
 */
export class WorkerControl {
  readonly follower: ControlFollower;
  /** Used only for partitions run here, i.e. once the worker is set up. */
  readonly markers: MarkerWriter;
  /** The control sequence in force on each partition run here. */
  private readonly applied = new Map<number, number>();
  /** The control sequence of each partition's checkpoint, once read. */
  private checkpointedSeqs: number[] | undefined;

  constructor(private readonly d: WorkerControlDeps) {
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
    await this.markers.accept(e.seq);
  }

  /** Partition `p` starts here under the rule set of `seq` (its checkpoint's, or 0). */
  started(p: number, seq: number): void {
    this.applied.set(p, seq);
  }

  /** Partition `p` applied the marker of `seq`: older rule sets may go. */
  appliedAt(p: number, seq: number): void {
    this.applied.set(p, seq);
    this.release();
  }

  /** Partition `p` no longer runs here. */
  stopped(p: number): void {
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
    // Checkpoints only move forward, so a value read earlier is a safe lower bound.
    this.checkpointedSeqs =
      (await this.d.store?.loadControlSeqs(this.d.partitions)) ?? this.checkpointedSeqs;
    this.release();
  }

  private release(): void {
    let floor = Infinity;
    if (this.d.store !== undefined) {
      if (this.checkpointedSeqs === undefined) return;
      this.checkpointedSeqs.forEach((seq, p) => {
        floor = Math.min(floor, this.applied.get(p) ?? seq);
      });
    } else for (const seq of this.applied.values()) floor = Math.min(floor, seq);
    if (Number.isFinite(floor)) this.follower.release(floor);
  }
}
