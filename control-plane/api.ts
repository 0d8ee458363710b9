import express, { type Router } from 'express';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import {
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import type { RouteHook, ServiceStatus } from '../service/status.js';
import { natsConnection } from '../jetstream/index.js';
import { allows, authMiddleware, TokenAuth, type Principal } from './auth.js';
import { starting, type ApiContext } from './context.js';
import { ControlLog } from './control-log.js';
import { ControlWriter } from './control-writer.js';
import { notFound } from './errors.js';
import { baseHeaders, errorHandler, jsonBody } from './http-support.js';
import { OPENAPI } from './openapi.js';
import type { ControlPlaneOptions } from './options.js';
import { mountBacktestRoutes } from './routes-backtest.js';
import { mountDlqRoutes } from './routes-dlq.js';
import { mountModelRoutes } from './routes-models.js';
import { mountOpsRoutes } from './routes-ops.js';
import { mountRuleRoutes } from './routes-rules.js';

/** The REST API under `/v1`, mounted on the service's HTTP server through its `routes` hook. */
export interface ControlPlane {
  /** The `/v1` router (everything below `/v1`). */
  readonly router: Router;
  /** Pass to `startService(…, { routes })`: mounts the router at `/v1` and keeps the pool for status. */
  readonly routes: RouteHook;
  /** Connects to NATS and folds `CONTROL`; until it resolves, `/v1` answers 503. */
  start(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Creates the control plane; call {@link ControlPlane.start} once the streams exist. `logInfo`
 * records what operators did outside `CONTROL` (dead-letter replays).
 */
export function createControlPlane(
  options: ControlPlaneOptions,
  logError: (message: string) => void = (m) => console.error(`[vigil api] ${m}`),
  logInfo: (message: string) => void = (m) => console.log(`[vigil api] ${m}`),
): ControlPlane {
  let nc: NatsConnection | undefined;
  let js: JetStreamClient | undefined;
  let jsm: JetStreamManager | undefined;
  let log: ControlLog | undefined;
  let writer: ControlWriter | undefined;
  let pool: ServiceStatus | undefined;
  /** The value once started; 503 before. */
  const ready = <T>(v: T | undefined): T => {
    if (v === undefined) throw starting();
    return v;
  };
  const ctx: ApiContext = {
    options,
    log: () => ready(log),
    writer: () => ready(writer),
    js: () => ready(js),
    jsm: () => ready(jsm),
    pool: () => pool,
  };

  const router = express.Router();
  router.use(baseHeaders);
  // The description of the API is public: it holds no data.
  router.get('/openapi.json', (_req, res) => {
    res.json(OPENAPI);
  });
  router.use(authMiddleware(new TokenAuth(options.tokens)));
  const small = jsonBody(options.maxBodyBytes);
  const large = jsonBody(options.maxModelBytes);
  // The large limit only for a token that may put a model: a read token gets the small one,
  // so the server does not read 8 MiB only to answer 403.
  router.use((req, res, next) =>
    (req.method === 'PUT' &&
      req.path.startsWith('/models/') &&
      allows((res.locals.principal as Principal | undefined)?.role ?? 'read', 'write')
      ? large
      : small)(req, res, next),
  );
  mountRuleRoutes(router, ctx);
  mountModelRoutes(router, ctx);
  mountOpsRoutes(router, ctx);
  mountDlqRoutes(router, ctx, logInfo);
  const backtests = mountBacktestRoutes(router, ctx);
  router.use((req, _res, next) => next(notFound('route', `${req.method} /v1${req.path}`)));
  router.use(errorHandler(logError));

  return {
    router,
    routes(app, p) {
      pool = p;
      app.use('/v1', router);
    },
    async start() {
      nc = await connect({
        ...natsConnection(options),
        name: 'vigil-control-plane',
        maxReconnectAttempts: -1,
      });
      js = jetstream(nc);
      jsm = await jetstreamManager(nc);
      const l = new ControlLog(js, jsm, options.limits);
      await l.start();
      log = l;
      writer = new ControlWriter(
        js,
        l,
        options.limits,
        options.applyTimeoutMs,
        nc.info?.max_payload ?? Infinity,
      );
    },
    async stop() {
      backtests.cancelAll();
      await log?.stop();
      await nc?.close();
      log = undefined;
      writer = undefined;
    },
  };
}
