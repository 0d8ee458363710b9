import { readFileSync } from 'node:fs';
import { ValidationError, type Problem, type RuleLimits } from '../rules/index.js';
import { partitionKeyFields } from '../protocol/index.js';

/** Roles, each including the ones before it: `read` < `write` < `admin`. */
export const ROLES = ['read', 'write', 'admin'] as const;
export type Role = (typeof ROLES)[number];

/** One API token: who it is (recorded as the actor of every change made with it) and its role. */
export interface ApiToken {
  readonly name: string;
  readonly role: Role;
  readonly token: string;
}

/** Settings of the REST API. Resolved once by {@link resolveControlPlaneOptions}. */
export interface ControlPlaneOptions {
  /** NATS server (the control plane publishes to `vigil.control` and follows `CONTROL`). */
  readonly natsUrl: string;
  /** The NATS user and password it connects as (the service's); '' for a server without users. */
  readonly natsUser: string;
  readonly natsPassword: string;
  /** The rule limits of the service: validation before publishing must judge as the shards do. */
  readonly limits: RuleLimits;
  /** Partitions of `EVENTS` and the bounded out-of-orderness: a back-test replays as the shards judge. */
  readonly partitions: number;
  readonly outOfOrderMs: number;
  /** The service's re-keying hop when it is on (a back-test runs it too); undefined when off. */
  readonly rekey:
    { readonly partitionKey: readonly string[]; readonly reportEveryMs: number } | undefined;
  /** This process among those sharing the partitions (the service's `instanceId`), shown by status. */
  readonly instanceId: string;
  /**
   * Most `EVENTS` records one back-test reads.
   * @default 1,000,000
   */
  readonly maxBacktestRecords: number;
  /**
   * Bearer tokens.
   * @default none, and then every `/v1` request is refused with 401
   */
  readonly tokens: readonly ApiToken[];
  /**
   * Largest request body, except for models.
   * @default 1 MiB
   */
  readonly maxBodyBytes: number;
  /**
   * Largest body of `PUT /v1/models/:id`.
   * @default the control-message limit, `limits.maxControlBytes` (8 MiB unless changed)
   */
  readonly maxModelBytes: number;
  /**
   * How long a change may take from publish to being applied by the control plane's fold.
   * @default 10 s
   */
  readonly applyTimeoutMs: number;
}

/** The service's settings the control plane follows (its NATS server and user, limits, partitions). */
export interface ServiceSettings {
  readonly natsUrl: string;
  readonly natsUser?: string;
  readonly natsPassword?: string;
  readonly limits: RuleLimits;
  readonly partitions: number;
  readonly outOfOrderMs: number;
  readonly instanceId?: string;
  /** The re-keying hop's settings (see the service's `rekey`, `partitionKey`, `rekeyReportMs`). */
  readonly rekey?: 'on' | 'off';
  readonly partitionKey?: string;
  readonly rekeyReportMs?: number;
}

/** Environment variables of the control plane. */
export const API_ENV = {
  /** `name:role:token` entries separated by commas, e.g. `ops:admin:6f1…,grafana:read:9c2…`. */
  tokens: 'VIGIL_API_TOKENS',
  /** A JSON file: an array of `{"name", "role", "token"}`. */
  tokensFile: 'VIGIL_API_TOKENS_FILE',
} as const;

/** Tokens shorter than this are refused: a bearer token must not be guessable. */
export const MIN_TOKEN_LENGTH = 16;

function checkTokens(raw: unknown[], where: string, problems: Problem[]): ApiToken[] {
  const out: ApiToken[] = [];
  raw.forEach((t, i) => {
    const at = `${where}/${i}`;
    const o = (typeof t === 'object' && t !== null ? t : {}) as Record<string, unknown>;
    const { name, role, token } = o;
    if (typeof name !== 'string' || !/^[A-Za-z0-9_.@-]{1,64}$/.test(name))
      problems.push({
        pointer: `${at}/name`,
        message:
          'name must be 1-64 letters, digits, "_", ".", "@" or "-" (it is recorded as the actor)',
      });
    if (typeof role !== 'string' || !(ROLES as readonly string[]).includes(role))
      problems.push({ pointer: `${at}/role`, message: `role must be one of ${ROLES.join(', ')}` });
    if (typeof token !== 'string' || token.length < MIN_TOKEN_LENGTH || /[\s,]/.test(token))
      problems.push({
        pointer: `${at}/token`,
        message: `token must be at least ${MIN_TOKEN_LENGTH} characters without spaces or commas; make one with: openssl rand -hex 24`,
      });
    if (typeof name === 'string' && typeof role === 'string' && typeof token === 'string')
      out.push({ name, role: role as Role, token });
  });
  return out;
}

/**
 * Builds the control plane's settings from the service's and the environment (`VIGIL_API_TOKENS`,
 * `VIGIL_API_TOKENS_FILE`), then `overrides`. Every bad setting is reported at once.
 * @throws ValidationError listing each problem.
 */
export function resolveControlPlaneOptions(
  service: ServiceSettings,
  overrides: Partial<ControlPlaneOptions> = {},
  env: NodeJS.ProcessEnv = process.env,
): ControlPlaneOptions {
  const problems: Problem[] = [];
  const tokens: ApiToken[] = [];
  const list = env[API_ENV.tokens];
  if (list) {
    const entries = list
      .split(',')
      .map((e) => e.trim())
      .filter((e) => e.length > 0);
    const parsed = entries.map((e) => {
      const [name, role, ...rest] = e.split(':');
      return { name, role, token: rest.join(':') };
    });
    tokens.push(...checkTokens(parsed, `/${API_ENV.tokens}`, problems));
  }
  const file = env[API_ENV.tokensFile];
  if (file) {
    try {
      const json = JSON.parse(readFileSync(file, 'utf8')) as unknown;
      if (!Array.isArray(json))
        problems.push({
          pointer: `/${API_ENV.tokensFile}`,
          message: `${file} must hold a JSON array of {"name", "role", "token"}`,
        });
      else tokens.push(...checkTokens(json, `/${API_ENV.tokensFile}`, problems));
    } catch (e) {
      problems.push({
        pointer: `/${API_ENV.tokensFile}`,
        message: `cannot read ${file}: ${(e as Error).message}`,
      });
    }
  }
  const merged: ControlPlaneOptions = {
    natsUrl: service.natsUrl,
    natsUser: overrides.natsUser ?? service.natsUser ?? '',
    natsPassword: overrides.natsPassword ?? service.natsPassword ?? '',
    limits: service.limits,
    partitions: service.partitions,
    outOfOrderMs: service.outOfOrderMs,
    rekey:
      service.rekey === 'on'
        ? {
            partitionKey: partitionKeyFields(service.partitionKey ?? ''),
            reportEveryMs: service.rekeyReportMs ?? 1000,
          }
        : undefined,
    instanceId: service.instanceId ?? '',
    maxBacktestRecords: overrides.maxBacktestRecords ?? 1_000_000,
    tokens: overrides.tokens ?? tokens,
    maxBodyBytes: overrides.maxBodyBytes ?? 1024 * 1024,
    maxModelBytes: overrides.maxModelBytes ?? service.limits.maxControlBytes,
    applyTimeoutMs: overrides.applyTimeoutMs ?? 10_000,
    ...(overrides.natsUrl === undefined ? {} : { natsUrl: overrides.natsUrl }),
  };
  if (overrides.tokens !== undefined) checkTokens([...overrides.tokens], '/tokens', problems);
  const names = new Set<string>();
  const secrets = new Set<string>();
  merged.tokens.forEach((t, i) => {
    if (names.has(t.name))
      problems.push({
        pointer: `/tokens/${i}/name`,
        message: `token name "${t.name}" is used twice`,
      });
    if (secrets.has(t.token))
      problems.push({ pointer: `/tokens/${i}/token`, message: 'two tokens have the same secret' });
    names.add(t.name);
    secrets.add(t.token);
  });
  for (const k of [
    'maxBodyBytes',
    'maxModelBytes',
    'applyTimeoutMs',
    'maxBacktestRecords',
  ] as const) {
    const v = merged[k];
    if (!Number.isSafeInteger(v) || v <= 0)
      problems.push({ pointer: `/${k}`, message: `${k} must be a positive integer, got ${v}` });
  }
  if (problems.length > 0) throw new ValidationError('control plane configuration', problems);
  return Object.freeze(merged);
}
