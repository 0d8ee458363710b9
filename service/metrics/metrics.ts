import { monitorEventLoopDelay } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { RecordHistogram } from './record-histogram.js';

/**
 * The metrics of one worker thread. Each worker has its own registry; the main thread merges them
 * into one exposition (`AggregatorRegistry.aggregate`): counters and histograms add up, and the
 * per-partition gauges do too because each partition has exactly one owner.
 */
export class WorkerMetrics {
  readonly registry = new Registry();
  readonly events = this.counter(
    'vigil_events_total',
    'Records read from the partition logs, by partition and outcome (judged, late, invalid, marker, tick, …)',
    ['partition', 'outcome'],
  );
  /** Observed for every event: a {@link RecordHistogram}, not prom-client's. */
  readonly processing = new RecordHistogram(
    'vigil_processing_seconds',
    'Time from an event being stored in EVENTS to its verdict',
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    this.registry,
  );
  readonly alerts = this.counter('vigil_alerts_total', 'Alerts published, by rule', ['rule']);
  readonly suppressed = this.counter(
    'vigil_alerts_suppressed_total',
    'Alerts held back by alert.suppressFor',
  );
  readonly dlq = this.counter(
    'vigil_dlq_total',
    'Messages sent to the dead-letter stream, by reason',
    ['reason'],
  );
  readonly ruleMatches = this.counter(
    'vigil_rule_matches_total',
    "Events a rule's when accepted (before its pattern), by rule",
    ['rule'],
  );
  readonly hopSent = this.counter(
    'vigil_hop_sent_total',
    "Messages a partition sent over the re-keying hop to its key spaces' partitions (forwarded events and watermark reports)",
    ['partition'],
  );
  readonly ruleKeyMissing = this.counter(
    'vigil_rule_key_missing_total',
    "Events of a rule's type that did not meet it because they lack its key field (or hold no string or number there), by rule",
    ['rule'],
  );
  readonly ruleErrors = this.counter(
    'vigil_rule_errors_total',
    'Events a rule failed on, by rule',
    ['rule'],
  );
  readonly quarantines = this.counter(
    'vigil_quarantines_total',
    'pause-rule messages published because a rule kept failing',
    ['rule'],
  );
  readonly overflows = this.counter(
    'vigil_state_overflow_total',
    'Keyed-state entries dropped at a per-key limit, by rule and limit',
    ['rule', 'limit'],
  );
  readonly controlApplied = this.gauge(
    'vigil_control_seq_applied',
    'CONTROL sequence in force, per partition',
    ['partition'],
  );
  readonly gcPause = this.histogram(
    'vigil_gc_pause_seconds',
    'Garbage-collection pauses of each worker thread, by kind (minor, major, incremental, weakcb); the worker judges no event and applies no marker meanwhile',
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
    ['worker', 'kind'],
  );
  readonly controlSeen = this.gauge(
    'vigil_control_seq_seen',
    'Highest CONTROL sequence this worker has read',
    ['worker'],
  );
  readonly activation = this.histogram(
    'vigil_activation_seconds',
    'Time from a control message being stored in CONTROL to its marker being applied on a partition',
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  );
  readonly offset = this.gauge(
    'vigil_partition_offset',
    'EVENTS sequence of the last record the partition processed',
    ['partition'],
  );
  readonly lag = this.gauge(
    'vigil_consumer_lag',
    'Messages of the partition not yet read by its consumer',
    ['partition'],
  );
  readonly watermarkLag = this.gauge(
    'vigil_watermark_lag_seconds',
    'Wall-clock time minus the partition watermark',
    ['partition'],
  );
  readonly liveKeys = this.gauge(
    'vigil_live_keys',
    "Keys holding keyed state in the partition's memory (restored keys included)",
    ['partition'],
  );
  readonly liveStates = this.gauge(
    'vigil_live_states',
    "(key, rule) states in the partition's memory; a key restored from a checkpoint counts once the partition has touched it",
    ['partition'],
  );
  readonly expired = this.counter(
    'vigil_state_expired_total',
    '(key, rule) states removed because event time passed their end, by reason (window, suppression, ttl)',
    ['reason'],
  );
  readonly checkpointSeconds = this.histogram(
    'vigil_checkpoint_duration_seconds',
    'Time to write one partition checkpoint (including waiting for its alerts to be acknowledged)',
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
  );
  readonly checkpointBytes = this.counter(
    'vigil_checkpoint_bytes_total',
    'Bytes written by checkpoints, by kind (incremental or full)',
    ['kind'],
  );
  readonly checkpointLast = this.gauge(
    'vigil_checkpoint_last_success_timestamp_seconds',
    'When the partition last checkpointed successfully',
    ['partition'],
  );
  readonly checkpointOffset = this.gauge(
    'vigil_checkpoint_offset',
    "EVENTS sequence covered by the partition's last checkpoint",
    ['partition'],
  );
  readonly checkpointFailures = this.counter(
    'vigil_checkpoint_failures_total',
    'Failed checkpoint writes, by partition and reason (store, fenced)',
    ['partition', 'reason'],
  );
  readonly ready = this.gauge(
    'vigil_worker_ready',
    '1 when the worker has caught up with CONTROL and runs its partitions',
    ['worker'],
  );
  readonly leasesHeld = this.gauge(
    'vigil_leases_held',
    'Partitions this worker runs under a lease of this process',
    ['worker'],
  );
  readonly leaseHandoffs = this.counter(
    'vigil_lease_handoffs_total',
    'Partitions that changed hands here, by reason (acquired, released after a final checkpoint, lost)',
    ['reason'],
  );
  // The worker's own heap (the main thread's is nodejs_heap_size_used_bytes): keyed state,
  // buffered events and checkpoint text live here. Added up over the workers.
  readonly heapUsed: Gauge = new Gauge({
    name: 'vigil_worker_heap_used_bytes',
    help: "Bytes used on the worker threads' V8 heaps (all workers of the process added up)",
    registers: [this.registry],
    collect: (): void => this.heapUsed.set(getHeapStatistics().used_heap_size),
  });
  // The worker's own event loop (the main thread's is nodejs_eventloop_lag_*): a long turn here
  // delays acks, control messages, checkpoints and lease renewals. Merged as the worst worker.
  private readonly loopDelay = (() => {
    const h = monitorEventLoopDelay({ resolution: 10 });
    h.enable();
    return h;
  })();
  readonly loopDelayP99: Gauge = new Gauge({
    name: 'vigil_worker_event_loop_delay_p99_seconds',
    help: 'p99 of the event-loop delay of the worst worker thread since the previous scrape',
    aggregator: 'max',
    registers: [this.registry],
    collect: (): void => this.loopDelayP99.set(this.loopDelay.percentile(99) / 1e9),
  });
  readonly loopDelayMax: Gauge = new Gauge({
    name: 'vigil_worker_event_loop_delay_max_seconds',
    help: 'Longest event-loop delay of the worst worker thread since the previous scrape',
    aggregator: 'max',
    registers: [this.registry],
    // Registered after the p99 gauge, whose collect runs first: the window restarts here.
    collect: (): void => {
      this.loopDelayMax.set(this.loopDelay.max / 1e9);
      this.loopDelay.reset();
    },
  });

  /** A counter in this worker's registry (labelled by `labelNames`). */
  private counter<L extends string = never>(
    name: string,
    help: string,
    labelNames: readonly L[] = [],
  ): Counter<L> {
    return new Counter({ name, help, labelNames, registers: [this.registry] });
  }

  /** A gauge in this worker's registry, added up over the workers. */
  private gauge<L extends string = never>(
    name: string,
    help: string,
    labelNames: readonly L[] = [],
  ): Gauge<L> {
    return new Gauge({ name, help, labelNames, registers: [this.registry] });
  }

  /** A histogram in this worker's registry. */
  private histogram<L extends string = never>(
    name: string,
    help: string,
    buckets: number[],
    labelNames: readonly L[] = [],
  ): Histogram<L> {
    return new Histogram({ name, help, labelNames, buckets, registers: [this.registry] });
  }
}

/** The `rule` label value of every rule beyond the cap of {@link RuleLabels}. */
export const OTHER_RULE_LABEL = '_other';

/**
 * Maps rule ids to `rule` label values with at most `max` distinct ids: the first `max` rules
 * seen keep their own label for the life of the process (so their series never flap), every
 * later one is counted under `rule="_other"`. Rule ids start with a letter or digit, so `_other`
 * is never a real rule.
 */
export class RuleLabels {
  private readonly admitted = new Set<string>();

  constructor(readonly max: number) {}

  label(ruleId: string): string {
    if (this.admitted.has(ruleId)) return ruleId;
    if (this.admitted.size >= this.max) return OTHER_RULE_LABEL;
    this.admitted.add(ruleId);
    return ruleId;
  }
}

type MetricsJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

/**
 * Caps the `rule` label of a merged exposition. Done once in the main thread, after the workers'
 * metrics are merged, so every worker's series of one rule get the same label and the cap holds
 * for the whole process, not per worker. Ids new in this scrape are admitted in sorted order, so
 * which rules keep their label does not depend on the order the workers answered in. Series that
 * end up with equal labels (several rules in `_other`) are added up by the next aggregation.
 */
export function capRuleLabels(metrics: MetricsJson, labels: RuleLabels): MetricsJson {
  const ids = new Set<string>();
  for (const m of metrics)
    for (const v of m.values) if (typeof v.labels.rule === 'string') ids.add(v.labels.rule);
  for (const id of [...ids].sort()) labels.label(id);
  return metrics.map((m) => ({
    ...m,
    values: m.values.map((v) =>
      typeof v.labels.rule === 'string'
        ? { ...v, labels: { ...v.labels, rule: labels.label(v.labels.rule) } }
        : v,
    ),
  }));
}
