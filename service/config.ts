import { readFileSync } from 'node:fs';
import { availableParallelism, hostname } from 'node:os';
import { resolveLimits, ValidationError, type Problem, type RuleLimits } from '../rules/index.js';
import { partitionKeyFields } from '../protocol/index.js';

/** Every setting of the service, with its default. Environment variables map onto it (see {@link ENV}). */
export interface VigilOptions {
  /**
   * NATS server URL.
   * @default `nats://127.0.0.1:4222`
   */
  readonly natsUrl: string;
  /**
   * NATS user the service connects as, on a server with users and permissions (see
   * `control-plane/nats-auth.example.conf`, user `vigil`).
   * @default '' (no user)
   */
  readonly natsUser: string;
  /**
   * That user's password.
   * @default ''
   */
  readonly natsPassword: string;
  /**
   * Redis URL (checkpoints and leases).
   * @default `redis://127.0.0.1:6379`
   */
  readonly redisUrl: string;
  /**
   * Interface of the HTTP server (health, metrics).
   * @default `127.0.0.1`
   */
  readonly httpHost: string;
  /**
   * Port of the HTTP server; 0 picks a free one.
   * @default 8080
   */
  readonly httpPort: number;
  /**
   * Partitions P of `EVENTS`: fixed for the life of the stream.
   * @default 16
   */
  readonly partitions: number;
  /**
   * Worker threads W of this process.
   * @default the number of cores
   */
  readonly workers: number;
  /**
   * Young generation of each worker thread's heap, in MB (V8's new space). A worker keeps much
   * of what it allocates for a while (reorder buffer, window entries, checkpoint text): with
   * V8's default most of it was copied by several scavenges (a large part of the rules core's
   * time in `bench:core`). Larger is not better: a scavenge, and a whole-heap collection's
   * final pause, grow with what the young generation holds, and a worker judges no event and
   * applies no marker meanwhile. Against a much larger young generation, `bench:e2e`'s longest
   * scavenges under load were shorter and throughput the same or better (bench/README.md).
   * @default 128
   */
  readonly workerYoungGenerationMb: number;
  /**
   * A worker whose partitions are idle after expiry removed much keyed state is collected; if
   * its heap then still commits, and its keyed state's typed arrays hold, this many MB more than
   * they use, the thread is replaced by a new one and its partitions restore from their final
   * checkpoints. V8 keeps a heap's grown room (its young generation above all) and the arrays
   * never shrink until the thread ends, so without this the process's memory stays near its peak
   * after the key space has shrunk. 0: never; also never without
   * checkpoints (the partitions would have nothing to restore from).
   * @default 64
   */
  readonly workerRecycleSlackMb: number;
  /**
   * Bounded out-of-orderness of event time, in ms.
   * @default 1000
   */
  readonly outOfOrderMs: number;
  /**
   * A partition that has read nothing for this long (ms), is caught up with its log and has
   * something a tick would release (buffered events, timers, state due to expire) gets a tick;
   * 0: never.
   * @default 1000
   */
  readonly tickIntervalMs: number;
  /**
   * The re-keying hop: `on` sends the events of rules keyed by other fields than the partition
   * key (see `partitionKey`) through `REKEY` to the partition of their key there, so such a rule
   * sees every event of its key; `off` judges them within the event's partition.
   * @default `on`
   */
  readonly rekey: 'on' | 'off';
  /**
   * The event field(s) producers partition by (publish under `events.<value>`), comma-separated:
   * rules keyed by exactly these fields stay in their partition, with no hop. Empty: every rule
   * with a `key` goes through the hop (with `rekey` on).
   * @default '' (none)
   */
  readonly partitionKey: string;
  /**
   * With `rekey` on: a partition reports its watermark to the key spaces' partitions when it has
   * moved this far (ms of event time), as well as at every rule change; a downstream partition
   * waits for the slowest of its sources.
   * @default 1000
   */
  readonly rekeyReportMs: number;
  /**
   * Rule errors (per rule version, per worker) after which the rule is paused through
   * `CONTROL`.
   * @default 100
   */
  readonly quarantineAfterErrors: number;
  /**
   * Duplicate window of `EVENTS`, `ALERTS` and `DLQ` (ms).
   * @default 10 minutes
   */
  readonly duplicateWindowMs: number;
  /**
   * Checkpoint interval per partition (ms); 0 turns checkpoints (and Redis) off.
   * @default 1000
   */
  readonly checkpointIntervalMs: number;
  /**
   * Records a partition may process past its last checkpoint before it stops reading (Redis
   * away).
   * @default 100,000
   */
  readonly maxUncheckpointedRecords: number;
  /**
   * Every this many checkpoints a partition's keyed state is rewritten whole; 0: never.
   * Checkpoints update one hash in place (no chain of deltas to compact), and a failed one hands
   * its keys to the next, so a whole rewrite only costs a pause proportional to the state.
   * @default 0
   */
  readonly checkpointFullEvery: number;
  /**
   * Most alert and DLQ publishes awaiting their ack per partition before the partition waits.
   * @default 1000
   */
  readonly maxInFlightPublishes: number;
  /**
   * Rules that get their own `rule` label in the metrics; the others are counted as
   * `rule="_other"`.
   * @default 100
   */
  readonly metricsMaxRuleLabels: number;
  /**
   * Lifetime of a partition lease in Redis (ms): a process that dies loses its partitions this
   * long after its last renewal, and another takes them over.
   * @default 10 s
   */
  readonly leaseTtlMs: number;
  /**
   * How often leases and the membership heartbeat are renewed, and a rebalance step is tried
   * (ms); at most a third of `leaseTtlMs`.
   * @default 2 s
   */
  readonly leaseRenewMs: number;
  /**
   * Identity of this process among those sharing the partitions. A process restarted with the
   * same id takes its partitions back at once instead of waiting for its old leases to expire.
   * Two live processes must not share one. The default is unique on a host while the port is
   * fixed: set it when `httpPort` is 0 and several processes share a host.
   * @default `<hostname>:<httpPort>`
   */
  readonly instanceId: string;
  /**
   * Limits of rules, models, events and state (`RuleLimits`, rules/limits.ts), set in the
   * `limits` object of the `VIGIL_CONFIG` file.
   * @default `resolveLimits()`
   */
  readonly limits: RuleLimits;
}

export const DEFAULT_OPTIONS: Omit<VigilOptions, 'limits' | 'workers'> = Object.freeze({
  natsUrl: 'nats://127.0.0.1:4222',
  natsUser: '',
  natsPassword: '',
  redisUrl: 'redis://127.0.0.1:6379',
  httpHost: '127.0.0.1',
  httpPort: 8080,
  partitions: 16,
  workerYoungGenerationMb: 128,
  workerRecycleSlackMb: 64,
  outOfOrderMs: 1000,
  tickIntervalMs: 1000,
  rekey: 'on',
  partitionKey: '',
  rekeyReportMs: 1000,
  quarantineAfterErrors: 100,
  duplicateWindowMs: 10 * 60_000,
  maxInFlightPublishes: 1000,
  checkpointIntervalMs: 1000,
  maxUncheckpointedRecords: 100_000,
  checkpointFullEvery: 0,
  metricsMaxRuleLabels: 100,
  leaseTtlMs: 10_000,
  leaseRenewMs: 2000,
  instanceId: '',
});

/** Environment variables and the settings they set. `VIGIL_CONFIG` names a JSON file of settings. */
export const ENV = {
  NATS_URL: 'natsUrl',
  NATS_USER: 'natsUser',
  NATS_PASSWORD: 'natsPassword',
  REDIS_URL: 'redisUrl',
  VIGIL_HTTP_HOST: 'httpHost',
  VIGIL_HTTP_PORT: 'httpPort',
  VIGIL_PARTITIONS: 'partitions',
  VIGIL_WORKERS: 'workers',
  VIGIL_WORKER_YOUNG_GENERATION_MB: 'workerYoungGenerationMb',
  VIGIL_WORKER_RECYCLE_SLACK_MB: 'workerRecycleSlackMb',
  VIGIL_OUT_OF_ORDER_MS: 'outOfOrderMs',
  VIGIL_TICK_INTERVAL_MS: 'tickIntervalMs',
  VIGIL_REKEY: 'rekey',
  VIGIL_PARTITION_KEY: 'partitionKey',
  VIGIL_REKEY_REPORT_MS: 'rekeyReportMs',
  VIGIL_QUARANTINE_AFTER_ERRORS: 'quarantineAfterErrors',
  VIGIL_DUPLICATE_WINDOW_MS: 'duplicateWindowMs',
  VIGIL_MAX_IN_FLIGHT_PUBLISHES: 'maxInFlightPublishes',
  VIGIL_CHECKPOINT_INTERVAL_MS: 'checkpointIntervalMs',
  VIGIL_MAX_UNCHECKPOINTED_RECORDS: 'maxUncheckpointedRecords',
  VIGIL_CHECKPOINT_FULL_EVERY: 'checkpointFullEvery',
  VIGIL_METRICS_MAX_RULE_LABELS: 'metricsMaxRuleLabels',
  VIGIL_LEASE_TTL_MS: 'leaseTtlMs',
  VIGIL_LEASE_RENEW_MS: 'leaseRenewMs',
  VIGIL_INSTANCE_ID: 'instanceId',
} as const;

const NUMERIC: Record<string, { min: number; max: number }> = {
  httpPort: { min: 0, max: 65535 },
  partitions: { min: 1, max: 1024 },
  workers: { min: 1, max: 256 },
  workerYoungGenerationMb: { min: 8, max: 8192 },
  workerRecycleSlackMb: { min: 0, max: 65536 },
  outOfOrderMs: { min: 0, max: 86_400_000 },
  tickIntervalMs: { min: 0, max: 3_600_000 },
  rekeyReportMs: { min: 1, max: 3_600_000 },
  quarantineAfterErrors: { min: 1, max: 1_000_000_000 },
  duplicateWindowMs: { min: 1000, max: 7 * 86_400_000 },
  maxInFlightPublishes: { min: 1, max: 1_000_000 },
  checkpointIntervalMs: { min: 0, max: 3_600_000 },
  maxUncheckpointedRecords: { min: 1, max: 100_000_000 },
  checkpointFullEvery: { min: 0, max: 1_000_000 },
  metricsMaxRuleLabels: { min: 0, max: 100_000 },
  leaseTtlMs: { min: 300, max: 600_000 },
  leaseRenewMs: { min: 50, max: 200_000 },
};

/** The re-keying settings. */
function rekeyProblems(merged: Record<string, unknown>): Problem[] {
  const problems: Problem[] = [];
  if (merged.rekey !== 'on' && merged.rekey !== 'off')
    problems.push({
      pointer: '/rekey',
      message: `setting "rekey" (VIGIL_REKEY) must be "on" or "off", got ${JSON.stringify(merged.rekey)}`,
    });
  const key = merged.partitionKey;
  const fields = typeof key === 'string' ? partitionKeyFields(key) : undefined;
  if (
    fields === undefined ||
    fields.length > 8 ||
    fields.some((f) => f === '') ||
    new Set(fields).size !== fields.length
  )
    problems.push({
      pointer: '/partitionKey',
      message: `setting "partitionKey" (VIGIL_PARTITION_KEY) must be up to 8 distinct field names separated by commas (the field(s) producers partition by, e.g. "payer"), or empty; got ${JSON.stringify(key)}`,
    });
  return problems;
}

/** The lease settings, checked against each other and against the duplicate window. */
function leaseProblems(merged: Record<string, unknown>): Problem[] {
  const problems: Problem[] = [];
  const id = merged.instanceId;
  if (typeof id !== 'string' || (id !== '' && !/^[A-Za-z0-9._:@/-]{1,200}$/.test(id)))
    problems.push({
      pointer: '/instanceId',
      message: `setting "instanceId" (VIGIL_INSTANCE_ID) must be 1 to 200 letters, digits or . _ : @ / -, got ${JSON.stringify(id)}`,
    });
  const { leaseTtlMs: ttl, leaseRenewMs: renew, duplicateWindowMs: window } = merged;
  const checkpoint = merged.checkpointIntervalMs;
  if (typeof ttl !== 'number' || typeof renew !== 'number') return problems;
  if (renew * 3 > ttl)
    problems.push({
      pointer: '/leaseRenewMs',
      message: `setting "leaseRenewMs" (VIGIL_LEASE_RENEW_MS) must be at most a third of "leaseTtlMs" (VIGIL_LEASE_TTL_MS), so that one failed renewal does not lose the leases; got ${renew} with a TTL of ${ttl}`,
    });
  // A partition taken over after a crash replays from its last checkpoint: the alerts it
  // re-publishes were first published up to a TTL and a checkpoint interval earlier, and ALERTS
  // dedupe absorbs them only within its duplicate window.
  if (typeof window === 'number' && typeof checkpoint === 'number' && window <= ttl + checkpoint)
    problems.push({
      pointer: '/duplicateWindowMs',
      message: `setting "duplicateWindowMs" (VIGIL_DUPLICATE_WINDOW_MS) must exceed "leaseTtlMs" + "checkpointIntervalMs" (${ttl} + ${checkpoint} ms), or alerts re-published after a takeover could appear twice in ALERTS; got ${window}`,
    });
  return problems;
}

/**
 * Builds the options once at start-up: defaults, then the `VIGIL_CONFIG` file, then environment
 * variables, then `overrides`. Every bad setting is reported at once, by name.
 * @throws ValidationError listing each bad setting.
 */
export function resolveOptions(
  overrides: Partial<Omit<VigilOptions, 'limits'>> & { limits?: Partial<RuleLimits> } = {},
  env: NodeJS.ProcessEnv = process.env,
): VigilOptions {
  const problems: Problem[] = [];
  const merged: Record<string, unknown> = {
    ...DEFAULT_OPTIONS,
    workers: Math.max(1, availableParallelism()),
  };
  let fileLimits: Partial<RuleLimits> = {};
  if (env.VIGIL_CONFIG) {
    try {
      const file = JSON.parse(readFileSync(env.VIGIL_CONFIG, 'utf8')) as Record<string, unknown>;
      const { limits, ...rest } = file;
      Object.assign(merged, rest);
      fileLimits = (limits ?? {}) as Partial<RuleLimits>;
    } catch (e) {
      problems.push({
        pointer: '/VIGIL_CONFIG',
        message: `cannot read the config file ${env.VIGIL_CONFIG}: ${(e as Error).message}`,
      });
    }
  }
  for (const [name, setting] of Object.entries(ENV)) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    merged[setting] = setting in NUMERIC ? Number(raw) : raw;
  }
  const { limits: limitOverrides, ...rest } = overrides;
  for (const [k, v] of Object.entries(rest)) if (v !== undefined) merged[k] = v;
  for (const k of Object.keys(merged)) {
    if (!(k in DEFAULT_OPTIONS) && k !== 'workers')
      problems.push({
        pointer: `/${k}`,
        message: `unknown setting "${k}"; settings are ${[...Object.keys(DEFAULT_OPTIONS), 'workers', 'limits'].join(', ')}`,
      });
  }
  for (const [k, { min, max }] of Object.entries(NUMERIC)) {
    const v = merged[k];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
      const envName = Object.entries(ENV).find(([, s]) => s === k)?.[0];
      problems.push({
        pointer: `/${k}`,
        message: `setting "${k}"${envName ? ` (${envName})` : ''} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`,
      });
    }
  }
  for (const k of ['natsUrl', 'redisUrl'] as const) {
    const v = merged[k];
    if (typeof v !== 'string' || !/^(nats|redis|rediss|tls|ws|wss):\/\//.test(v))
      problems.push({
        pointer: `/${k}`,
        message: `setting "${k}" must be a URL such as ${DEFAULT_OPTIONS[k]}, got ${JSON.stringify(v)}`,
      });
  }
  if (typeof merged.natsUser !== 'string' || typeof merged.natsPassword !== 'string')
    problems.push({
      pointer: '/natsUser',
      message: 'settings "natsUser" (NATS_USER) and "natsPassword" (NATS_PASSWORD) must be strings',
    });
  else if ((merged.natsUser === '') !== (merged.natsPassword === ''))
    problems.push({
      pointer: merged.natsUser === '' ? '/natsUser' : '/natsPassword',
      message:
        'settings "natsUser" (NATS_USER) and "natsPassword" (NATS_PASSWORD) go together: set both, or neither for a server without users',
    });
  problems.push(...leaseProblems(merged), ...rekeyProblems(merged));
  if (merged.instanceId === '') merged.instanceId = `${hostname()}:${String(merged.httpPort)}`;
  let limits: RuleLimits | undefined;
  try {
    limits = resolveLimits({ ...fileLimits, ...limitOverrides });
  } catch (e) {
    if (e instanceof ValidationError)
      problems.push(...e.problems.map((p) => ({ ...p, pointer: `/limits${p.pointer}` })));
    else throw e;
  }
  if (problems.length > 0 || limits === undefined)
    throw new ValidationError('Vigil configuration', problems);
  return Object.freeze({ ...(merged as unknown as VigilOptions), limits });
}
