import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { AggregatorRegistry, Counter, Gauge, Registry } from 'prom-client';
import { followAlertLatency } from './alert-latency.js';
import { natsConnection } from '../../jetstream/index.js';
import type { VigilOptions } from '../config.js';
import { checkpointKeys } from '../checkpoint/checkpoint-store.js';
import { capRuleLabels, RuleLabels } from './metrics.js';
import { Streams } from '../../protocol/index.js';
import { partitionLabel } from '../threads/partition-runner.js';
import type { WorkerPool } from '../threads/worker-pool.js';
import type { WorkerStatus } from '../status.js';

/** A scrape must not hang on a server that is away: each lookup gets this long. */
const LOOKUP_TIMEOUT_MS = 2000;

function within<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    p.then(resolve, reject).finally(() => clearTimeout(timer));
  });
}

/** Where the main thread reads what no single worker knows. */
export interface ProcessMetricSources {
  /** Last sequence of `CONTROL`. */
  controlHead?(): Promise<number>;
  /** Entries and bytes of each checkpointed keyed-state hash (see {@link stateKey}). */
  stateSizes?(hashes: readonly StateHash[]): Promise<{ keys: number; bytes: number }[]>;
  /** Failed lease-store calls so far, by operation (the lease coordinator's count). */
  leaseStoreFailures?(): ReadonlyMap<string, number>;
}

/**
 * Metrics of the service process as a whole, collected by the main thread at scrape time: the
 * head of `CONTROL` (next to each partition's applied sequence, so a divergence shows), the size
 * of the keyed state as checkpointed in Redis, and worker restarts. Also caps the `rule` label
 * of the merged exposition (`metricsMaxRuleLabels`).
 */
export class ProcessMetrics {
  readonly registry = new Registry();
  private readonly ruleLabels: RuleLabels;

  constructor(
    private readonly pool: WorkerPool,
    maxRuleLabels: number,
    sources: ProcessMetricSources,
    private readonly close_: () => Promise<void> = async () => {},
  ) {
    this.ruleLabels = new RuleLabels(maxRuleLabels);
    const { controlHead, stateSizes, leaseStoreFailures } = sources;
    if (controlHead)
      new Gauge({
        name: 'vigil_control_seq_head',
        help: 'Last sequence of the CONTROL stream (compare with vigil_control_seq_applied)',
        registers: [this.registry],
        async collect() {
          // On failure the last value stays: a stale head is better than a gap in the graph.
          const head = await within(controlHead(), LOOKUP_TIMEOUT_MS).catch(() => undefined);
          if (head !== undefined) this.set(head);
        },
      });
    if (stateSizes) {
      // A registry starts every collect before awaiting any: both gauges share one lookup per scrape.
      type Lookup = { hashes: StateHash[]; sizes: { keys: number; bytes: number }[] | undefined };
      let pending: Promise<Lookup> | undefined;
      const lookup = (): Promise<Lookup> => {
        if (pending !== undefined) return pending;
        const spaces = [undefined, ...pool.keySpaces()];
        const hashes = pool
          .status()
          .flatMap((s) => s.partitions)
          .flatMap((partition) => spaces.map((space) => ({ partition, space })));
        const p = within(stateSizes(hashes), LOOKUP_TIMEOUT_MS).then(
          (sizes) => ({ hashes, sizes }),
          () => ({ hashes, sizes: undefined }),
        );
        pending = p;
        void p.then(() => {
          if (pending === p) pending = undefined;
        });
        return p;
      };
      const gauge = (name: string, help: string, pick: 'keys' | 'bytes'): Gauge =>
        new Gauge({
          name,
          help,
          labelNames: ['partition'],
          registers: [this.registry],
          async collect() {
            // On failure the last values stay.
            const { hashes, sizes } = await lookup();
            if (sizes === undefined) return;
            // Only the partitions this process runs now: a partition that moved away has no series here.
            this.reset();
            hashes.forEach(({ partition, space }, i) => {
              const size = sizes[i];
              if (size !== undefined)
                this.set({ partition: partitionLabel(partition, space) }, size[pick]);
            });
          },
        });
      gauge(
        'vigil_state_keys',
        "Keys with keyed state in the partition's checkpoint in Redis (fields of its state hash)",
        'keys',
      );
      gauge(
        'vigil_state_bytes',
        "Redis memory used by the partition's checkpointed keyed state (MEMORY USAGE, sampled)",
        'bytes',
      );
    }
    if (leaseStoreFailures) {
      const seen = new Map<string, number>();
      new Counter({
        name: 'vigil_lease_store_failures_total',
        help: 'Lease-store (Redis) calls of the main thread that failed, by operation: heartbeats and renewals while Redis is away',
        labelNames: ['op'],
        registers: [this.registry],
        collect() {
          for (const [op, n] of leaseStoreFailures()) {
            this.inc({ op }, n - (seen.get(op) ?? 0));
            seen.set(op, n);
          }
        },
      });
    }
    workerCounter(
      this.registry,
      pool,
      'vigil_worker_restarts_total',
      'Worker threads restarted after they died, by worker',
      (s) => s.restarts,
    );
    workerCounter(
      this.registry,
      pool,
      'vigil_worker_recycles_total',
      'Worker threads replaced by a new one to hand back heap room after expiry, by worker',
      (s) => s.recycles,
    );
  }

  /** The merged exposition of the workers and `extra` registries, with the rule label capped. */
  async exposition(extra: Registry[] = []): Promise<Registry> {
    const merged = await this.pool.metrics([...extra, this.registry]);
    return AggregatorRegistry.aggregate([
      capRuleLabels(await merged.getMetricsAsJSON(), this.ruleLabels),
    ]);
  }

  close(): Promise<void> {
    return this.close_();
  }
}

/** A keyed-state hash: of an event log's partition, or (`space` given) of a key space's partition of that number. */
export interface StateHash {
  readonly partition: number;
  readonly space: string | undefined;
}

/** The checkpoint store's key of a keyed-state hash (see checkpoint-store.ts). */
export const stateKey = ({ partition, space }: StateHash, prefix = 'vigil:'): string =>
  checkpointKeys(partition, space, prefix)[1];

/**
 * Process metrics reading `CONTROL` and `ALERTS` from NATS and, when checkpoints are on, state
 * sizes from Redis.
 */
export async function startProcessMetrics(
  pool: WorkerPool,
  options: VigilOptions,
  leaseStoreFailures?: () => ReadonlyMap<string, number>,
): Promise<ProcessMetrics> {
  const nc: NatsConnection = await connect({
    ...natsConnection(options),
    name: 'vigil-metrics',
    maxReconnectAttempts: -1,
  });
  const jsm: JetStreamManager = await jetstreamManager(nc);
  // Fails fast while Redis is away (no offline queue): the scrape keeps the last values.
  const redis =
    options.checkpointIntervalMs > 0
      ? new Redis(options.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 })
      : undefined;
  redis?.on('error', () => {
    // Reconnects by itself; a failed lookup only leaves the gauges as they were.
  });
  const sources: ProcessMetricSources = {
    ...(leaseStoreFailures && { leaseStoreFailures }),
    controlHead: async () => (await jsm.streams.info(Streams.control)).state.last_seq,
    ...(redis && {
      async stateSizes(hashes: readonly StateHash[]) {
        const pipe = redis.pipeline();
        for (const h of hashes) pipe.hlen(stateKey(h)).call('MEMORY', 'USAGE', stateKey(h));
        const replies = (await pipe.exec()) ?? [];
        return hashes.map((_, i) => ({
          keys: Number(replies[2 * i]?.[1] ?? 0),
          bytes: Number(replies[2 * i + 1]?.[1] ?? 0),
        }));
      },
    }),
  };
  const metrics = new ProcessMetrics(pool, options.metricsMaxRuleLabels, sources, async () => {
    await alerts.stop();
    redis?.disconnect();
    await nc.close();
  });
  const alerts = await followAlertLatency(
    jetstream(nc),
    metrics.registry,
    () => new Set(pool.status().flatMap((s) => s.partitions)),
  );
  return metrics;
}

/** A counter per worker that follows a count the pool keeps (it only grows while the process runs). */
function workerCounter(
  registry: Registry,
  pool: WorkerPool,
  name: string,
  help: string,
  count: (s: WorkerStatus) => number,
): void {
  const seen = new Map<string, number>();
  new Counter({
    name,
    help,
    labelNames: ['worker'],
    registers: [registry],
    collect() {
      for (const s of pool.status()) {
        const w = String(s.worker);
        this.inc({ worker: w }, count(s) - (seen.get(w) ?? 0));
        seen.set(w, count(s));
      }
    },
  });
}
