import type { Metric, MetricValueWithName, Registry } from 'prom-client';

/** What a registry reads of a histogram: prom-client's `Histogram.get()` shape. */
interface HistogramValues {
  readonly name: string;
  readonly help: string;
  readonly type: 'histogram';
  readonly values: MetricValueWithName<string>[];
  readonly aggregator: 'sum';
}

/**
 * A histogram without labels, observed once per record, that a prom-client `Registry` exposes and
 * merges like prom-client's own `Histogram` (same buckets, `le` labels, `_sum` and `_count`,
 * summed across worker threads). Why not prom-client's: its `observe` builds label objects and a
 * hash on every call, a visible share of a worker's time at one call per record (bench/README.md);
 * this one adds to a bucket count. A test holds its exposition to prom-client's for the same values.
 */
export class RecordHistogram {
  readonly type = 'histogram' as const;
  readonly aggregator = 'sum' as const;
  private readonly counts: Float64Array;
  private sum = 0;
  private count = 0;

  constructor(
    readonly name: string,
    readonly help: string,
    /** Upper bounds, ascending, as prom-client's `buckets`. */
    private readonly upper: readonly number[],
    registry: Registry,
  ) {
    this.counts = new Float64Array(upper.length);
    // The registry takes prom-client's classes only by type; it calls get() and reset().
    registry.registerMetric(this as unknown as Metric);
  }

  observe(value: number): void {
    const upper = this.upper;
    let i = 0;
    while (i < upper.length && value > (upper[i] as number)) i++;
    if (i < upper.length) this.counts[i] = (this.counts[i] as number) + 1;
    this.sum += value;
    this.count++;
  }

  /** The values as prom-client's `Histogram.get()` gives them. */
  get(): Promise<HistogramValues> {
    const values: MetricValueWithName<string>[] = [];
    let acc = 0;
    this.upper.forEach((le, i) => {
      acc += this.counts[i] as number;
      values.push({ labels: { le }, value: acc, metricName: `${this.name}_bucket` });
    });
    values.push({ labels: { le: '+Inf' }, value: this.count, metricName: `${this.name}_bucket` });
    values.push({ labels: {}, value: this.sum, metricName: `${this.name}_sum` });
    values.push({ labels: {}, value: this.count, metricName: `${this.name}_count` });
    return Promise.resolve({
      name: this.name,
      help: this.help,
      type: this.type,
      values,
      aggregator: this.aggregator,
    });
  }

  reset(): void {
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }
}
