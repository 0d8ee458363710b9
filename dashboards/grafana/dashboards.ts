/**
 * The Grafana dashboards, as data: `dashboards/grafana/dashboards/*.json` are written from here
 * (`node --import tsx dashboards/grafana/dashboards.ts`, then Prettier), and a test checks that
 * the committed JSON equals what this module builds, so the two cannot drift apart.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The uid of the provisioned Prometheus datasource (provisioning/datasources/prometheus.yml). */
export const DATASOURCE_UID = 'vigil-prometheus';

const datasource = { type: 'prometheus', uid: DATASOURCE_UID } as const;

/** Every query is restricted to the instances picked in the dashboard's `instance` variable. */
const I = 'instance=~"$instance"';
const RATE = '$__rate_interval';

interface Target {
  readonly expr: string;
  readonly legend?: string;
}

interface PanelSpec {
  readonly title: string;
  readonly description: string;
  readonly targets: readonly Target[];
  readonly unit?: string;
  readonly kind?: 'timeseries' | 'stat' | 'table';
  /** Width in grid columns (of 24); height is 8, stats 4. */
  readonly w?: number;
}

interface Panel {
  readonly id: number;
  readonly type: string;
  readonly title: string;
  readonly description: string;
  readonly datasource: typeof datasource;
  readonly gridPos: { h: number; w: number; x: number; y: number };
  readonly fieldConfig: { defaults: Record<string, unknown>; overrides: [] };
  readonly options: Record<string, unknown>;
  readonly targets: {
    refId: string;
    datasource: typeof datasource;
    expr: string;
    legendFormat: string;
    instant?: boolean;
    format?: string;
  }[];
}

export interface Dashboard {
  readonly uid: string;
  readonly title: string;
  readonly description: string;
  readonly tags: string[];
  readonly panels: Panel[];
  readonly [key: string]: unknown;
}

function layout(specs: readonly PanelSpec[]): Panel[] {
  let x = 0;
  let y = 0;
  let rowHeight = 0;
  return specs.map((s, i) => {
    const kind = s.kind ?? 'timeseries';
    const w = s.w ?? (kind === 'stat' ? 6 : 12);
    const h = kind === 'stat' ? 4 : 8;
    if (x + w > 24) {
      x = 0;
      y += rowHeight;
      rowHeight = 0;
    }
    const gridPos = { h, w, x, y };
    x += w;
    rowHeight = Math.max(rowHeight, h);
    const options: Record<string, unknown> =
      kind === 'stat'
        ? {
            reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
            colorMode: 'value',
            graphMode: 'area',
            textMode: 'auto',
          }
        : kind === 'table'
          ? { showHeader: true }
          : {
              legend: { displayMode: 'list', placement: 'bottom', showLegend: true },
              tooltip: { mode: 'multi', sort: 'desc' },
            };
    return {
      id: i + 1,
      type: kind,
      title: s.title,
      description: s.description,
      datasource,
      gridPos,
      fieldConfig: { defaults: { unit: s.unit ?? 'short' }, overrides: [] },
      options,
      targets: s.targets.map((t, j) => ({
        refId: String.fromCharCode(65 + j),
        datasource,
        expr: t.expr,
        legendFormat: t.legend ?? '__auto',
        ...(kind === 'table' ? { instant: true, format: 'table' } : {}),
      })),
    };
  });
}

function dashboard(uid: string, title: string, description: string, specs: PanelSpec[]): Dashboard {
  return {
    uid,
    title,
    description,
    tags: ['vigil'],
    editable: true,
    graphTooltip: 1,
    refresh: '10s',
    schemaVersion: 39,
    version: 1,
    time: { from: 'now-1h', to: 'now' },
    timepicker: {},
    timezone: 'browser',
    links: [
      {
        title: 'Vigil dashboards',
        type: 'dashboards',
        tags: ['vigil'],
        asDropdown: true,
        includeVars: true,
        keepTime: true,
      },
    ],
    templating: {
      list: [
        {
          name: 'instance',
          label: 'Instance',
          type: 'query',
          datasource,
          query: { query: 'label_values(vigil_worker_ready, instance)', refId: 'instance' },
          definition: 'label_values(vigil_worker_ready, instance)',
          refresh: 2,
          // No allValue: "All" is then the regex of the listed (Vigil) instances, so process_*
          // and nodejs_* panels do not pick up other jobs' processes.
          includeAll: true,
          multi: true,
          current: { selected: true, text: ['All'], value: ['$__all'] },
          sort: 1,
        },
      ],
    },
    annotations: { list: [] },
    panels: layout(specs),
  };
}

/** p50 and p99 of a histogram over the selected instances. */
function quantiles(histogram: string, by = ''): Target[] {
  const group = by ? `${by}, le` : 'le';
  return [0.5, 0.99].map((q) => ({
    expr: `histogram_quantile(${q}, sum by (${group}) (rate(${histogram}_bucket{${I}}[${RATE}])))`,
    legend: by ? `p${q * 100} {{${by}}}` : `p${q * 100}`,
  }));
}

/** The two queries the Prometheus integration test runs against a live service. */
export const THROUGHPUT_EXPR = `sum(rate(vigil_events_total{outcome="judged", ${I}}[${RATE}]))`;
export const ALERTS_BY_RULE_EXPR = `sum by (rule) (rate(vigil_alerts_total{${I}}[${RATE}]))`;

const overview = dashboard(
  'vigil-overview',
  'Vigil / Overview',
  'Is Vigil up, keeping up, and producing alerts?',
  [
    {
      title: 'Ready workers',
      description: 'Worker threads caught up with CONTROL and running their partitions.',
      kind: 'stat',
      targets: [{ expr: `sum(vigil_worker_ready{${I}})` }],
    },
    {
      title: 'Events judged / s',
      description: 'Events judged by the rules, all partitions.',
      kind: 'stat',
      unit: 'ops',
      targets: [{ expr: THROUGHPUT_EXPR }],
    },
    {
      title: 'Consumer lag',
      description: 'Messages in EVENTS not yet read, all partitions.',
      kind: 'stat',
      targets: [{ expr: `sum(vigil_consumer_lag{${I}})` }],
    },
    {
      title: 'CONTROL head - lowest applied',
      description:
        'Control messages stored but not yet in force on every partition. Stays above 0 after a rejected (invalid) last message, which no partition applies.',
      kind: 'stat',
      targets: [
        {
          expr: `max(vigil_control_seq_head{${I}}) - min(vigil_control_seq_applied{${I}})`,
        },
      ],
    },
    {
      title: 'Throughput by outcome',
      description:
        'Records read from the partition logs: judged events, late and invalid events (dead-lettered), markers, ticks.',
      unit: 'ops',
      targets: [
        {
          expr: `sum by (outcome) (rate(vigil_events_total{${I}}[${RATE}]))`,
          legend: '{{outcome}}',
        },
      ],
    },
    {
      title: 'Alerts by rule',
      description: 'Alerts published to ALERTS, per rule (rules beyond the label cap in _other).',
      unit: 'ops',
      targets: [{ expr: ALERTS_BY_RULE_EXPR, legend: '{{rule}}' }],
    },
    {
      title: 'Processing latency (stored in EVENTS to verdict)',
      description: 'From JetStream storing an event to the rules judging it.',
      unit: 's',
      targets: quantiles('vigil_processing_seconds'),
    },
    {
      title: 'End-to-end alert latency (event time to stored in ALERTS)',
      description:
        'From the event time at which an alert fired to ALERTS storing it. Events without their own ts have the time EVENTS stored them; with producer timestamps this includes the producer delay, and absence alerts include VIGIL_OUT_OF_ORDER_MS.',
      unit: 's',
      targets: quantiles('vigil_alert_latency_seconds'),
    },
    {
      title: 'Dead letters by reason',
      w: 24,
      description: 'Messages sent to the DLQ stream (see docs/operations.md for each reason).',
      unit: 'ops',
      targets: [
        {
          expr: `sum by (reason) (rate(vigil_dlq_total{${I}}[${RATE}]))`,
          legend: '{{reason}}',
        },
      ],
    },
    {
      title: 'CPU (process)',
      description: 'CPU seconds per second of each service process (all its threads).',
      unit: 'percentunit',
      targets: [
        {
          expr: `rate(process_cpu_seconds_total{${I}}[${RATE}])`,
          legend: '{{instance}}',
        },
      ],
      w: 8,
    },
    {
      title: 'Resident memory (process)',
      description: 'Resident set size of each service process.',
      unit: 'bytes',
      targets: [{ expr: `process_resident_memory_bytes{${I}}`, legend: '{{instance}}' }],
      w: 8,
    },
    {
      title: 'Event-loop lag p99 (main thread)',
      description: 'A high value delays /metrics, /readyz and the REST API, not the workers.',
      unit: 's',
      targets: [{ expr: `nodejs_eventloop_lag_p99_seconds{${I}}`, legend: '{{instance}}' }],
      w: 8,
    },
  ],
);

const rules = dashboard(
  'vigil-rules',
  'Vigil / Rules',
  'What each rule does: matches, alerts, errors, quarantines, state limits, and how fast changes take effect.',
  [
    {
      title: 'Alerts by rule',
      description: 'Alerts published to ALERTS, per rule (rules beyond the label cap in _other).',
      unit: 'ops',
      targets: [{ expr: ALERTS_BY_RULE_EXPR, legend: '{{rule}}' }],
    },
    {
      title: 'Matches by rule',
      description:
        "Events each rule's when accepted (before its pattern). Matching often without alerting points at a window or threshold.",
      unit: 'ops',
      targets: [
        {
          expr: `sum by (rule) (rate(vigil_rule_matches_total{${I}}[${RATE}]))`,
          legend: '{{rule}}',
        },
      ],
    },
    {
      title: 'Top rules by alerts, last hour',
      description: 'The ten rules with the most alerts in the last hour.',
      kind: 'table',
      targets: [{ expr: `topk(10, sum by (rule) (increase(vigil_alerts_total{${I}}[1h])))` }],
    },
    {
      title: 'Rule errors by rule',
      description:
        'Events a rule failed on (each also on the DLQ as rule-error). A rule that keeps failing is quarantined.',
      unit: 'ops',
      targets: [
        {
          expr: `sum by (rule) (rate(vigil_rule_errors_total{${I}}[${RATE}]))`,
          legend: '{{rule}}',
        },
      ],
    },
    {
      title: 'Quarantines, last hour',
      description:
        'pause-rule messages Vigil published for rules that kept failing. The rule stays paused until resumed.',
      kind: 'table',
      targets: [{ expr: `sum by (rule) (increase(vigil_quarantines_total{${I}}[1h]))` }],
    },
    {
      title: 'Keyed-state entries dropped at a limit',
      description: 'State dropped because a per-key limit was reached, by rule and limit.',
      unit: 'ops',
      targets: [
        {
          expr: `sum by (rule, limit) (rate(vigil_state_overflow_total{${I}}[${RATE}]))`,
          legend: '{{rule}} {{limit}}',
        },
      ],
    },
    {
      title: 'Alerts suppressed',
      description: 'Alerts held back by alert.suppressFor.',
      unit: 'ops',
      targets: [{ expr: `sum(rate(vigil_alerts_suppressed_total{${I}}[${RATE}]))` }],
    },
    {
      title: 'Activation latency (stored in CONTROL to applied on a partition)',
      description:
        'How long a rule change takes to be in force on a partition: its marker reaching the head of the partition.',
      unit: 's',
      targets: quantiles('vigil_activation_seconds'),
    },
    {
      title: 'CONTROL sequence: head, read by workers, in force',
      description:
        'The head of CONTROL, the highest sequence each worker has read, and the lowest and highest in force on a partition.',
      targets: [
        { expr: `max(vigil_control_seq_head{${I}})`, legend: 'head' },
        {
          expr: `max by (worker) (vigil_control_seq_seen{${I}})`,
          legend: 'read by worker {{worker}}',
        },
        { expr: `min(vigil_control_seq_applied{${I}})`, legend: 'lowest in force' },
        { expr: `max(vigil_control_seq_applied{${I}})`, legend: 'highest in force' },
      ],
    },
    {
      title: 'Partitions per rule-set version',
      description:
        'How many partitions have each CONTROL sequence in force; more than one line for long means partitions disagree.',
      targets: [
        {
          expr: `count_values("controlSeq", vigil_control_seq_applied{${I}})`,
          legend: 'sequence {{controlSeq}}',
        },
      ],
      w: 24,
    },
  ],
);

const partitions = dashboard(
  'vigil-partitions',
  'Vigil / Partitions and shards',
  'Per partition and per worker: throughput, lag, event time, state.',
  [
    {
      title: 'Records read by partition',
      description: 'Every record of the partition log: events, markers, ticks.',
      unit: 'ops',
      targets: [
        {
          expr: `sum by (partition) (rate(vigil_events_total{${I}}[${RATE}]))`,
          legend: '{{partition}}',
        },
      ],
    },
    {
      title: 'Consumer lag by partition',
      description: 'Messages of the partition not yet read (as of the last record read).',
      targets: [{ expr: `max by (partition) (vigil_consumer_lag{${I}})`, legend: '{{partition}}' }],
    },
    {
      title: 'Watermark lag by partition',
      description:
        'Wall-clock time minus the partition watermark: how far event time trails real time (includes VIGIL_OUT_OF_ORDER_MS).',
      unit: 's',
      targets: [
        {
          expr: `max by (partition) (vigil_watermark_lag_seconds{${I}})`,
          legend: '{{partition}}',
        },
      ],
    },
    {
      title: 'CONTROL sequence in force by partition',
      description: 'The rule-set version each partition judges with.',
      targets: [
        {
          expr: `max by (partition) (vigil_control_seq_applied{${I}})`,
          legend: '{{partition}}',
        },
      ],
    },
    {
      title: 'Keyed-state entries by partition',
      description: "Entries (rule lineage x key) in the partition's checkpoint in Redis.",
      targets: [{ expr: `max by (partition) (vigil_state_keys{${I}})`, legend: '{{partition}}' }],
    },
    {
      title: 'Keyed-state bytes by partition',
      description: "Redis memory used by the partition's checkpointed keyed state.",
      unit: 'bytes',
      targets: [{ expr: `max by (partition) (vigil_state_bytes{${I}})`, legend: '{{partition}}' }],
    },
    {
      title: 'Partitions held by instance',
      description:
        'Partitions each process runs under a lease. With several processes they should be balanced.',
      targets: [{ expr: `sum by (instance) (vigil_leases_held{${I}})`, legend: '{{instance}}' }],
    },
    {
      title: 'Lease handoffs by reason',
      description:
        'Partitions that changed hands: acquired, released (after a final checkpoint) or lost (the lease expired or was taken).',
      targets: [
        {
          expr: `sum by (instance, reason) (increase(vigil_lease_handoffs_total{${I}}[${RATE}]))`,
          legend: '{{instance}} {{reason}}',
        },
      ],
    },
    {
      title: 'Workers ready',
      description: '1 when the worker has caught up with CONTROL and runs its partitions.',
      targets: [
        {
          expr: `max by (instance, worker) (vigil_worker_ready{${I}})`,
          legend: '{{instance}} worker {{worker}}',
        },
      ],
    },
    {
      title: 'Worker event-loop delay (worst worker)',
      description:
        'Event-loop delay of the worst worker thread between scrapes. Long turns delay acks, control messages, checkpoints and lease renewals.',
      unit: 's',
      targets: [
        {
          expr: `max by (instance) (vigil_worker_event_loop_delay_p99_seconds{${I}})`,
          legend: 'p99 {{instance}}',
        },
        {
          expr: `max by (instance) (vigil_worker_event_loop_delay_max_seconds{${I}})`,
          legend: 'max {{instance}}',
        },
      ],
    },
    {
      title: 'Worker garbage-collection pauses',
      description:
        "Share of each worker thread's time stopped by its garbage collector, by kind (minor: young generation; major: whole heap). A worker applies no marker while it is stopped: a rule activation slow on one worker's partitions only often met one of its long pauses (bench/README.md).",
      unit: 'percentunit',
      targets: [
        {
          expr: `sum by (instance, worker, kind) (rate(vigil_gc_pause_seconds_sum{${I}}[${RATE}]))`,
          legend: '{{instance}} worker {{worker}} {{kind}}',
        },
      ],
    },
    {
      title: 'Worker restarts, last hour',
      description:
        'Worker threads that died and were restarted (their partitions replay from checkpoints).',
      targets: [
        {
          expr: `sum by (instance, worker) (increase(vigil_worker_restarts_total{${I}}[1h]))`,
          legend: '{{instance}} worker {{worker}}',
        },
      ],
    },
  ],
);

const checkpoints = dashboard(
  'vigil-checkpoints',
  'Vigil / Checkpoints and recovery',
  'Are checkpoints being written, how big and how slow, and how much a crash would replay.',
  [
    {
      title: 'Age of the last checkpoint by partition',
      description:
        'Seconds since the partition last checkpointed successfully (interval: VIGIL_CHECKPOINT_INTERVAL_MS).',
      unit: 's',
      targets: [
        {
          expr: `time() - max by (partition) (vigil_checkpoint_last_success_timestamp_seconds{${I}})`,
          legend: '{{partition}}',
        },
      ],
    },
    {
      title: 'Records a crash would replay, by partition',
      description: 'Records processed since the last checkpoint: the replay after a crash.',
      targets: [
        {
          expr: `max by (partition) (vigil_partition_offset{${I}}) - max by (partition) (vigil_checkpoint_offset{${I}})`,
          legend: '{{partition}}',
        },
      ],
    },
    {
      title: 'Checkpoint duration',
      description:
        'Writing one partition checkpoint, including waiting for its alerts to be acknowledged.',
      unit: 's',
      targets: quantiles('vigil_checkpoint_duration_seconds'),
    },
    {
      title: 'Checkpoints written / s',
      description: 'Successful partition checkpoints per second.',
      unit: 'ops',
      targets: [{ expr: `sum(rate(vigil_checkpoint_duration_seconds_count{${I}}[${RATE}]))` }],
    },
    {
      title: 'Checkpoint bytes by kind',
      description: 'Bytes written to Redis: incremental (changed keys) and full rewrites.',
      unit: 'Bps',
      targets: [
        {
          expr: `sum by (kind) (rate(vigil_checkpoint_bytes_total{${I}}[${RATE}]))`,
          legend: '{{kind}}',
        },
      ],
    },
    {
      title: 'Checkpoint failures by reason',
      description: 'store: Redis failed or timed out; fenced: another owner holds the partition.',
      unit: 'ops',
      targets: [
        {
          expr: `sum by (reason) (rate(vigil_checkpoint_failures_total{${I}}[${RATE}]))`,
          legend: '{{reason}}',
        },
      ],
    },
    {
      title: 'Keyed state in Redis',
      description: 'Redis memory used by all checkpointed keyed state of the selected instances.',
      unit: 'bytes',
      targets: [{ expr: `sum(vigil_state_bytes{${I}})`, legend: 'bytes' }],
    },
    {
      title: 'Worker restarts, last hour',
      description:
        'Each restart restores the worker partitions from their checkpoints and replays.',
      targets: [
        {
          expr: `sum by (instance, worker) (increase(vigil_worker_restarts_total{${I}}[1h]))`,
          legend: '{{instance}} worker {{worker}}',
        },
      ],
    },
  ],
);

/** File name (in dashboards/grafana/dashboards/) → dashboard. */
export const DASHBOARDS: Readonly<Record<string, Dashboard>> = {
  'vigil-overview.json': overview,
  'vigil-rules.json': rules,
  'vigil-partitions.json': partitions,
  'vigil-checkpoints.json': checkpoints,
};

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const [file, d] of Object.entries(DASHBOARDS))
    writeFileSync(
      new URL(`./dashboards/${file}`, import.meta.url),
      `${JSON.stringify(d, null, 2)}\n`,
    );
}
