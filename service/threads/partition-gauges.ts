import { ExpiryReason, type PartitionState } from '../../rules/index.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { LogRecord } from '../ingest/event-source.js';

/**
 * A partition's gauges and counters under its `partition` label, resolved once: label lookups
 * cost more than the updates, so the runner writes them every 64 records and by a timer.
 */
export class PartitionGauges {
  readonly offset;
  private readonly judged;
  private readonly lag;
  private readonly watermarkLag;
  private readonly liveKeys;
  private readonly liveStates;
  private readonly expired;
  /** The partition's expiry counts already added to the counter. */
  private readonly expiredCounted: Record<ExpiryReason, number> = {
    window: 0,
    suppression: 0,
    ttl: 0,
  };

  constructor(metrics: WorkerMetrics, partition: string) {
    this.judged = metrics.events.labels({ partition, outcome: 'judged' });
    this.lag = metrics.lag.labels({ partition });
    this.offset = metrics.offset.labels({ partition });
    this.watermarkLag = metrics.watermarkLag.labels({ partition });
    this.liveKeys = metrics.liveKeys.labels({ partition });
    this.liveStates = metrics.liveStates.labels({ partition });
    this.expired = Object.values(ExpiryReason).map(
      (reason) => [reason, metrics.expired.labels({ reason })] as const,
    );
  }

  /** Where the partition stands after record `r`, and the events judged since the last flush. */
  flushRecord(r: LogRecord, watermark: number, judged: number): void {
    this.lag.set(r.pending);
    this.offset.set(r.seq);
    if (Number.isFinite(watermark))
      this.watermarkLag.set(Math.max(0, Date.now() - watermark) / 1000);
    if (judged > 0) this.judged.inc(judged);
  }

  /** The partition's keyed state in memory, and what expired since the last flush (by the timer). */
  flushState(st: PartitionState): void {
    this.liveKeys.set(st.states.size + st.raw.size);
    let states = 0;
    for (const n of st.lineageKeys.values()) states += n;
    this.liveStates.set(states);
    const counted = this.expiredCounted;
    for (const [reason, counter] of this.expired) {
      if (st.expired[reason] > counted[reason]) {
        counter.inc(st.expired[reason] - counted[reason]);
        counted[reason] = st.expired[reason];
      }
    }
  }
}
