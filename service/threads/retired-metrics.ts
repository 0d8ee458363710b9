import { AggregatorRegistry } from 'prom-client';

/** One metric of a worker's exposition as `Registry.getMetricsAsJSON` gives it. */
interface MetricJson {
  readonly type?: unknown;
}

interface Ended {
  readonly slot: number;
  /** The ended thread's `threadId`; -1 for the fold of earlier ones. */
  readonly thread: number;
  readonly metrics: MetricJson[];
}

/**
 * The counters and histograms of worker threads that have ended. A thread that is replaced (at
 * its own request after mass expiry, or after a crash) starts its counters at 0: without these,
 * the process's totals would fall, which Prometheus reads as a restart of the process and
 * `vigil_events_total` as fewer records read. A recycled thread hands over its final figures;
 * for a crashed one, those of the last scrape are all there is (what it counted since is lost,
 * as it would be with the process). Gauges are left out: they say what is now.
 */
export class RetiredMetrics {
  /** The newest exposition of each slot's live thread. */
  private readonly latest = new Map<number, { thread: number; metrics: readonly MetricJson[] }>();
  private ended: Ended[] = [];

  /** The newest exposition of thread `thread`, now in slot `slot`. */
  seen(slot: number, thread: number, metrics: unknown): void {
    if (Array.isArray(metrics)) this.latest.set(slot, { thread, metrics: metrics as MetricJson[] });
  }

  /** The thread of slot `slot` ended: its last counters and histograms stay in the totals. */
  retire(slot: number): void {
    const last = this.latest.get(slot);
    this.latest.delete(slot);
    if (last === undefined) return;
    const kept = last.metrics.filter((m) => m.type === 'counter' || m.type === 'histogram');
    this.ended.push({ slot, thread: last.thread, metrics: kept });
  }

  /**
   * What to merge with the live threads' expositions of one scrape. `answered` are the threads
   * whose own exposition the scrape holds: one that answered and then ended is counted once.
   */
  async parts(answered: ReadonlySet<number>): Promise<object[][]> {
    // Only the newest ended thread of a slot can have answered a scrape under way: the older
    // ones are folded into one part, so the list stays short however often threads end.
    const newest = new Map<number, Ended>();
    for (const e of this.ended) if (e.thread >= 0) newest.set(e.slot, e);
    const older = this.ended.filter((e) => newest.get(e.slot) !== e);
    if (older.length > 1) {
      const fold = (await AggregatorRegistry.aggregate(
        older.map((e) => e.metrics),
      ).getMetricsAsJSON()) as MetricJson[];
      this.ended = [{ slot: -1, thread: -1, metrics: fold }, ...newest.values()];
    }
    return this.ended.filter((e) => !answered.has(e.thread)).map((e) => e.metrics);
  }
}
