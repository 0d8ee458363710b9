/** How one control message took effect on the partitions of this process. */
export interface Activation {
  readonly controlSeq: number;
  /** Partitions of this process that have applied it. */
  readonly partitions: number;
  /** Stored in CONTROL → applied, on the slowest of those partitions (ms). */
  readonly maxMs: number;
}

/**
 * The control sequence in force on each partition this process runs, and the activation time of
 * recent control messages, as the workers report them when they apply a marker. Read by the main
 * thread (status, benchmarks) without asking the workers for their metrics.
 */
export class ActivationLog {
  private readonly applied = new Map<number, number>();
  private readonly recent = new Map<
    number,
    { partitions: number; maxMs: number; times: [partition: number, ms: number][] }
  >();

  constructor(private readonly keep = 256) {}

  /** Partition `p` applied the marker of `controlSeq`, `ms` after it was stored in CONTROL. */
  record(p: number, controlSeq: number, ms: number | undefined): void {
    if ((this.applied.get(p) ?? 0) < controlSeq) this.applied.set(p, controlSeq);
    const a = this.recent.get(controlSeq) ?? { partitions: 0, maxMs: 0, times: [] };
    a.partitions++;
    if (ms !== undefined) {
      if (ms > a.maxMs) a.maxMs = ms;
      a.times.push([p, ms]);
    }
    this.recent.set(controlSeq, a);
    // Map order is insertion order: the oldest sequences go first.
    for (const seq of this.recent.keys()) {
      if (this.recent.size <= this.keep) break;
      this.recent.delete(seq);
    }
  }

  /** A partition moved away: it no longer counts. */
  forget(p: number): void {
    this.applied.delete(p);
  }

  /** The control sequence in force on partition `p` here, if it has applied any marker. */
  appliedAt(p: number): number | undefined {
    return this.applied.get(p);
  }

  /** The activation of `controlSeq`, while it is among the recent ones. */
  activation(controlSeq: number): Activation | undefined {
    const a = this.recent.get(controlSeq);
    return a === undefined ? undefined : { controlSeq, partitions: a.partitions, maxMs: a.maxMs };
  }

  /** Recent activations, oldest first. */
  activations(): Activation[] {
    return [...this.recent].map(([controlSeq, a]) => ({
      controlSeq,
      partitions: a.partitions,
      maxMs: a.maxMs,
    }));
  }

  /**
   * Each partition's time for `controlSeq` (stored in CONTROL → applied, ms), in the order they
   * applied it: where a slow change was slow (one worker's partitions, or all of them).
   */
  partitionTimes(controlSeq: number): readonly (readonly [partition: number, ms: number])[] {
    return this.recent.get(controlSeq)?.times ?? [];
  }
}
