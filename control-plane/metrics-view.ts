/** Reading the service's merged Prometheus metrics (prom-client's JSON form) for the API. */

/** One metric of `Registry.getMetricsAsJSON()`. */
export interface MetricJSON {
  readonly name: string;
  readonly type?: string;
  readonly values: readonly {
    readonly value: number;
    readonly labels: Readonly<Record<string, string | number>>;
    readonly metricName?: string;
  }[];
}

/** Sums a metric's values whose labels include `labels`. */
export function sumMetric(
  metrics: readonly MetricJSON[],
  name: string,
  labels: Readonly<Record<string, string>> = {},
  sample = name,
): number {
  const m = metrics.find((x) => x.name === name);
  if (m === undefined) return 0;
  let sum = 0;
  for (const v of m.values) {
    if ((v.metricName ?? name) !== sample) continue;
    if (Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want)) sum += v.value;
  }
  return sum;
}

/** A metric's value per partition (`partition` label). */
export function byPartition(metrics: readonly MetricJSON[], name: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const v of metrics.find((x) => x.name === name)?.values ?? []) {
    const p = Number(v.labels.partition);
    if (Number.isInteger(p)) out.set(p, (out.get(p) ?? 0) + v.value);
  }
  return out;
}

/**
 * A quantile of a histogram from its cumulative buckets: the upper bound of the first bucket
 * holding that share of the observations (an upper estimate, as Prometheus' buckets allow).
 */
export function histogramQuantile(
  metrics: readonly MetricJSON[],
  name: string,
  q: number,
): number | null {
  const m = metrics.find((x) => x.name === name);
  if (m === undefined) return null;
  const buckets = new Map<number, number>();
  for (const v of m.values) {
    if (v.metricName !== `${name}_bucket`) continue;
    const le = v.labels.le === '+Inf' ? Infinity : Number(v.labels.le);
    buckets.set(le, (buckets.get(le) ?? 0) + v.value);
  }
  const sorted = [...buckets].sort((a, b) => a[0] - b[0]);
  const total = sorted.at(-1)?.[1] ?? 0;
  if (total === 0) return null;
  for (const [le, count] of sorted) if (count >= q * total) return Number.isFinite(le) ? le : null;
  return null;
}
