import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import type { VigilOptions } from './config.js';
import { startHttp, type RouteHook } from './http.js';
import { startProcessMetrics } from './process-metrics.js';
import { ensureStreams, verifyMapping } from './streams.js';
import { WorkerPool, type Logger } from './worker-pool.js';

/** A running service. */
export interface RunningService {
  /** Base URL of the HTTP server (health, readiness, metrics). */
  readonly url: string;
  readonly pool: WorkerPool;
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

/**
 * Starts the service: creates or checks the streams, verifies the server's partition mapping,
 * starts the worker threads and the HTTP server.
 */
export async function startService(
  options: VigilOptions,
  log: Logger = defaultLog,
  hooks: ServiceHooks = {},
): Promise<RunningService> {
  const nc = await connect({ servers: options.natsUrl, name: 'vigil-setup' });
  try {
    await ensureStreams(await jetstreamManager(nc), options.duplicateWindowMs);
    await verifyMapping(nc, options.partitions);
  } finally {
    await nc.close();
  }
  const pool = new WorkerPool(options, log);
  pool.start();
  const processMetrics = await startProcessMetrics(pool, options);
  const http = await startHttp(
    pool,
    options.httpHost,
    options.httpPort,
    hooks.routes,
    processMetrics,
  );
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
    async stop() {
      await pool.stop();
      await http.close();
      await processMetrics.close();
    },
  };
}
