import type { Server } from 'node:http';
import express from 'express';
import { collectDefaultMetrics, Registry } from 'prom-client';
import type { ProcessMetrics } from './metrics/process-metrics.js';
import type { WorkerPool } from './threads/worker-pool.js';
import type { RouteHook } from './status.js';

/** The HTTP side of the service: health, readiness and metrics, and whatever `routes` adds. */
export async function startHttp(
  pool: WorkerPool,
  host: string,
  port: number,
  routes?: RouteHook,
  processMetrics?: ProcessMetrics,
): Promise<{ server: Server; url: string; close(): Promise<void> }> {
  const app = express();
  app.disable('x-powered-by');
  const own = new Registry();
  collectDefaultMetrics({ register: own });
  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.get('/readyz', (_req, res) => {
    const workers = pool.status();
    const ready = pool.ready;
    // With leases: whether ownership lets this process serve, and why not (`reason`).
    const ownership = pool.ownershipStatus();
    res.status(ready ? 200 : 503).json({ ready, ...(ownership && { ownership }), workers });
  });
  app.get('/metrics', (_req, res, next) => {
    (processMetrics ? processMetrics.exposition([own]) : pool.metrics([own]))
      .then(async (registry) => {
        res.set('Content-Type', registry.contentType);
        res.send(await registry.metrics());
      })
      .catch(next);
  });
  routes?.(app, pool);
  const server = await new Promise<Server>((resolve, reject) => {
    const s = app.listen(port, host, () => resolve(s));
    s.once('error', reject);
  });
  const addr = server.address();
  const actual = typeof addr === 'object' && addr !== null ? addr.port : port;
  return {
    server,
    url: `http://${host}:${actual}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
