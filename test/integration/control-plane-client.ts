import { randomBytes } from 'node:crypto';
import { resolveControlPlaneOptions, type ApiToken } from '../../control-plane/index.js';
import { startVigil, type RunningVigil } from '../../app/index.js';
import type { Alert } from '../../rules/index.js';
import { resolveOptions, type VigilOptions } from '../../service/index.js';
import { type TestServers, readAlerts } from './servers.js';

/** Three tokens, one per role, with random secrets. */
export function testTokens(): { read: ApiToken; write: ApiToken; admin: ApiToken } {
  const t = (name: string, role: ApiToken['role']): ApiToken => ({
    name,
    role,
    token: randomBytes(24).toString('hex'),
  });
  return { read: t('reader', 'read'), write: t('writer', 'write'), admin: t('root', 'admin') };
}

export interface ApiResponse {
  readonly status: number;
  readonly headers: Headers;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary JSON
  readonly body: any;
}

/** A small client for the REST API. */
export function apiClient(base: string) {
  return async (
    method: string,
    path: string,
    opts: { token?: string; body?: unknown; headers?: Record<string, string>; raw?: string } = {},
  ): Promise<ApiResponse> => {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
    let body: string | undefined = opts.raw;
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(`${base}${path}`, { method, headers, body });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, headers: res.headers, body: parsed };
  };
}

/**
 * The service with its REST API on the test servers, without checkpoints, on a free port, with
 * `tokens`; `service` and `api` settings override those. Resolves once the service is ready.
 */
export async function startTestVigil(
  servers: TestServers,
  tokens: readonly ApiToken[],
  service: Partial<VigilOptions>,
  api: Record<string, unknown> = {},
): Promise<RunningVigil> {
  const options = resolveOptions(
    { natsUrl: servers.nats.url, checkpointIntervalMs: 0, httpPort: 0, ...service },
    {},
  );
  const vigil = await startVigil(
    options,
    resolveControlPlaneOptions(options, { tokens, ...api }, {}),
    (level, m) => {
      if (level !== 'info') console.log(`[vigil ${level}] ${m}`);
    },
  );
  await vigil.service.whenReady();
  return vigil;
}

/** Every alert in `ALERTS`, in stream order. */
export async function alertsIn(servers: TestServers): Promise<Alert[]> {
  return await readAlerts(servers);
}
