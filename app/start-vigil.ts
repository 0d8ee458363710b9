import {
  resolveOptions,
  startService,
  type Logger,
  type RunningService,
  type VigilOptions,
} from '../service/index.js';
import {
  createControlPlane,
  resolveControlPlaneOptions,
  type ControlPlane,
  type ControlPlaneOptions,
} from '../control-plane/index.js';
import { mountHomePage } from './home-page.js';

/** The service with its REST API: what `npm start` and `app/main.ts` run. */
export interface RunningVigil {
  readonly service: RunningService;
  readonly controlPlane: ControlPlane;
  /** Base URL: a page of links at `/`, `/healthz`, `/metrics`, and the API under `/v1`. */
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * Starts the service with the control plane mounted on its HTTP server, and a page of links at
 * `/`. The composition lives here, not in `service/`, so the service never depends on the
 * control plane.
 */
export async function startVigil(
  options: VigilOptions = resolveOptions(),
  api: ControlPlaneOptions = resolveControlPlaneOptions(options),
  log?: Logger,
): Promise<RunningVigil> {
  const controlPlane = createControlPlane(
    api,
    log === undefined ? undefined : (m) => log('error', `api: ${m}`),
    log === undefined ? undefined : (m) => log('info', `api: ${m}`),
  );
  const service = await startService(options, log, {
    routes: (app, status) => {
      mountHomePage(app);
      controlPlane.routes(app, status);
    },
  });
  try {
    await controlPlane.start();
  } catch (e) {
    await service.stop();
    throw e;
  }
  return {
    service,
    controlPlane,
    url: service.url,
    async stop() {
      await controlPlane.stop();
      await service.stop();
    },
  };
}
