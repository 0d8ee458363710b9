import { randomUUID } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { natsConnection } from '../jetstream/index.js';
import type { VigilOptions } from './config.js';
import { startHttp } from './http.js';
import type { RouteHook } from './status.js';
import { startProcessMetrics } from './metrics/process-metrics.js';
import { adoptPartitionSubjects, ensureStreams, verifyMapping } from './ingest/streams.js';
import { WorkerPool, type Logger } from './threads/worker-pool.js';
import { HeldLeases } from './ownership/held-leases.js';
import { LeaseCoordinator } from './ownership/lease-coordinator.js';
import { RedisLeaseStore } from './ownership/lease-store.js';

/** A running service. */
export interface RunningService {
  /** Base URL of the HTTP server (health, readiness, metrics). */
  readonly url: string;
  readonly pool: WorkerPool;
  /** The partition leases of this process; undefined when checkpoints (and Redis) are off. */
  readonly ownership: LeaseCoordinator | undefined;
  /** Resolves once every worker is ready. */
  whenReady(timeoutMs?: number): Promise<void>;
  /** Graceful stop: workers finish in-flight records, flush alerts, close connections. */
  stop(): Promise<void>;
}

const defaultLog: Logger = (level, message) =>
  console[level === 'info' ? 'log' : level](`[vigil] ${message}`);

/** What a caller adds to the service without the service knowing it (dependencies point one way). */
export interface ServiceHooks {
  /** More HTTP routes, mounted before the server listens (e.g. the control plane's `/v1`). */
  readonly routes?: RouteHook;
}

/** This process's partition leases before they are taken: the store, and the table of held leases. */
interface Leases {
  readonly store: RedisLeaseStore;
  readonly held: HeldLeases;
  readonly incarnation: string;
}

/**
 * With checkpoints on, the lease store and the table of held leases, made before the worker pool
 * and the lease coordinator, which both use the table; undefined with checkpoints off (no Redis).
 */
function openLeases(options: VigilOptions, log: Logger): Leases | undefined {
  if (options.checkpointIntervalMs === 0) return undefined;
  const incarnation = `${Date.now().toString(36)}-${randomUUID().slice(0, 8)}`;
  const store = new RedisLeaseStore(
    options.redisUrl,
    options.instanceId,
    incarnation,
    options.leaseTtlMs,
  );
  return { store, held: new HeldLeases(store, log), incarnation };
}

/**
 * Gives the worker threads partitions: with checkpoints on, those this process
 * wins leases for in Redis (shared with the other processes, balanced, moving at run time);
 * with checkpoints off there is no Redis, and one process runs every partition.
 */
function startOwnership(
  pool: WorkerPool,
  leases: Leases | undefined,
  options: VigilOptions,
  log: Logger,
): LeaseCoordinator | undefined {
  if (leases === undefined) {
    for (let p = 0; p < options.partitions; p++) pool.startPartition(p, 0);
    return undefined;
  }
  const { store, held, incarnation } = leases;
  const ownership = new LeaseCoordinator(
    store,
    held,
    {
      start: (p, token) => pool.startPartition(p, token),
      stop: (p, reason) => pool.stopPartition(p, reason),
    },
    {
      partitions: options.partitions,
      ttlMs: options.leaseTtlMs,
      renewMs: options.leaseRenewMs,
      log,
    },
  );
  log(
    'info',
    `instance ${options.instanceId} (incarnation ${incarnation}) joins the partition leases`,
  );
  void ownership.start();
  return ownership;
}

/**
 * Starts the service: creates or checks the streams, verifies the server's partition mapping,
 * starts the worker threads, takes partition leases, and starts the HTTP server.
 */
export async function startService(
  options: VigilOptions,
  log: Logger = defaultLog,
  hooks: ServiceHooks = {},
): Promise<RunningService> {
  // The threads start first: loading their modules takes a while (it counts in recovery after a
  // crash), and they wait for the streams checked here before they follow CONTROL.
  const leases = openLeases(options, log);
  const pool = new WorkerPool(options, log, leases?.held);
  pool.start();
  try {
    const nc = await connect({ ...natsConnection(options), name: 'vigil-setup' });
    try {
      await ensureStreams(
        await jetstreamManager(nc),
        options.duplicateWindowMs,
        options.partitions,
      );
      await verifyMapping(nc, options.partitions);
      await adoptPartitionSubjects(await jetstreamManager(nc), options.partitions);
      const maxPayload = nc.info?.max_payload;
      if (maxPayload !== undefined && maxPayload < options.limits.maxControlBytes + 1024)
        log(
          'warn',
          `the NATS server's max_payload is ${maxPayload} bytes, less than a control message may be (limits.maxControlBytes ${options.limits.maxControlBytes} and its headers): larger models will be refused with 413; raise max_payload in nats-server's configuration (config/nats.conf sets 9MB) or lower limits.maxControlBytes`,
        );
    } finally {
      await nc.close();
    }
  } catch (e) {
    await pool.abort();
    await leases?.store.close();
    throw e;
  }
  pool.streamsReady();
  const ownership = startOwnership(pool, leases, options, log);
  const stopRuntime = async (): Promise<void> => {
    // Rebalancing ends, the workers checkpoint every partition, then the leases are released.
    await ownership?.stop();
    await pool.stop();
    await ownership?.release();
  };
  let processMetrics: Awaited<ReturnType<typeof startProcessMetrics>> | undefined;
  let http: Awaited<ReturnType<typeof startHttp>>;
  try {
    processMetrics = await startProcessMetrics(
      pool,
      options,
      ownership && (() => ownership.storeFailures()),
    );
    http = await startHttp(pool, options.httpHost, options.httpPort, hooks.routes, processMetrics);
  } catch (e) {
    // A service that cannot serve (its HTTP port taken, say) must not outlive the error: its
    // threads would keep the process up, and its leases would keep the partitions from the other
    // processes until they expire.
    await stopRuntime();
    await processMetrics?.close();
    throw e;
  }
  const metrics = processMetrics;
  return {
    url: http.url,
    pool,
    async whenReady(timeoutMs = 60_000) {
      const until = Date.now() + timeoutMs;
      while (!pool.ready) {
        if (Date.now() > until)
          throw new Error(
            `workers not ready after ${timeoutMs} ms: ${JSON.stringify(pool.status())}`,
          );
        await new Promise((r) => setTimeout(r, 25));
      }
    },
    ownership,
    async stop() {
      await stopRuntime();
      await http.close();
      await metrics.close();
    },
  };
}
