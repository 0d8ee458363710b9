import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ERROR_CODES, ErrorCode, VigilError } from '../rules/index.js';

/** Exit codes of `vigil`: a script can tell what went wrong without reading the message. */
export const EXIT = {
  ok: 0,
  /** Not valid (422), or `validate` found problems. */
  invalid: 1,
  /** Bad command line or input file. */
  usage: 2,
  /** No or bad token (401), or the role does not allow it (403). */
  auth: 3,
  notFound: 4,
  /** The version changed since it was read (409). */
  conflict: 5,
  /** The service could not be reached or failed (5xx). */
  unavailable: 6,
  /** Interrupted (Ctrl-C): 128 + SIGINT, as shells report it. */
  interrupted: 130,
} as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** The code of a CLI failure without an API error behind it, by exit code. */
const CODE_OF_EXIT: Readonly<Record<ExitCode, ErrorCode>> = {
  0: ErrorCode.Internal,
  1: ErrorCode.Validation,
  2: ErrorCode.Usage,
  3: ErrorCode.Unauthorized,
  4: ErrorCode.NotFound,
  5: ErrorCode.Conflict,
  6: ErrorCode.Unavailable,
  130: ErrorCode.Interrupted,
};

/**
 * A failure that ends the command with an exit code and a message. Its `code` is the API's when
 * the service answered with an error (`body.error.code`), else the one its exit code stands for.
 */
export class CliError extends VigilError {
  override name = 'CliError';
  constructor(
    readonly exitCode: ExitCode,
    message: string,
    readonly body?: unknown,
  ) {
    const apiCode = (body as { error?: { code?: unknown } } | undefined)?.error?.code;
    const code = Object.hasOwn(ERROR_CODES, String(apiCode))
      ? (apiCode as ErrorCode)
      : CODE_OF_EXIT[exitCode];
    super(code, message);
  }
}

export interface ClientSettings {
  readonly url: string;
  readonly token: string | undefined;
  /** NATS, for `alerts tail`, and the user to connect as (`NATS_USER`, `NATS_PASSWORD`; none when unset). */
  readonly nats: string;
  readonly natsUser?: string;
  readonly natsPassword?: string;
}

/** A CLI config file (`--config`, `VIGIL_CLI_CONFIG`, default `~/.config/vigil/cli.json`). */
interface CliConfigFile {
  readonly url?: string;
  readonly token?: string;
  readonly nats?: string;
}

function configFile(path: string | undefined, env: NodeJS.ProcessEnv): CliConfigFile {
  const explicit = path ?? env.VIGIL_CLI_CONFIG;
  const file = explicit ?? (env.HOME ? join(env.HOME, '.config/vigil/cli.json') : undefined);
  if (file === undefined || (explicit === undefined && !existsSync(file))) return {};
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new CliError(EXIT.usage, `cannot read the config file ${file}: ${(e as Error).message}`);
  }
  const c = (typeof raw === 'object' && raw !== null ? raw : {}) as Record<string, unknown>;
  for (const k of Object.keys(c))
    if (!['url', 'token', 'nats'].includes(k) || typeof c[k] !== 'string')
      throw new CliError(
        EXIT.usage,
        `${file}: "${k}" is not a setting; use {"url", "token", "nats"} (strings)`,
      );
  return c as CliConfigFile;
}

/**
 * URL, token and NATS URL: flags, then the environment (`VIGIL_URL`, `VIGIL_TOKEN` or
 * `VIGIL_TOKEN_FILE`, `NATS_URL`), then the config file, then what `npm start` wrote under
 * `.vigil/` of `cwd` (`api-url`, `api-token`, `nats-url`: the ports it ran on), then the defaults.
 */
export function clientSettings(
  flags: { url?: string; token?: string; nats?: string; config?: string },
  env: NodeJS.ProcessEnv,
  cwd: string,
): ClientSettings {
  const c = configFile(flags.config === undefined ? undefined : resolve(cwd, flags.config), env);
  /** A file `npm start` wrote under `.vigil/` for this session, if it is there. */
  const local = (name: string): string | undefined => {
    const file = resolve(cwd, '.vigil', name);
    return existsSync(file) ? readFileSync(file, 'utf8').trim() || undefined : undefined;
  };
  const url = (
    flags.url ??
    env.VIGIL_URL ??
    c.url ??
    local('api-url') ??
    'http://127.0.0.1:8080'
  ).replace(/\/+$/, '');
  // A URL that does not parse is the command line's fault (2), not an unreachable service (6).
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (parsed === undefined || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:'))
    throw new CliError(
      EXIT.usage,
      `"${url}" is not an http(s) URL; set --url or VIGIL_URL, e.g. http://127.0.0.1:8080`,
    );
  let token = flags.token ?? env.VIGIL_TOKEN;
  if (token === undefined && env.VIGIL_TOKEN_FILE !== undefined) {
    try {
      token = readFileSync(env.VIGIL_TOKEN_FILE, 'utf8').trim();
    } catch (e) {
      throw new CliError(
        EXIT.usage,
        `cannot read the token file VIGIL_TOKEN_FILE=${env.VIGIL_TOKEN_FILE}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'there is no such file' : (e as Error).message}; point VIGIL_TOKEN_FILE at a file that holds the token, or set VIGIL_TOKEN`,
      );
    }
  }
  // npm start's session token goes only to that session's service: its URL, or (without an
  // api-url file) one on this machine, never to a URL named elsewhere for another service.
  const sessionUrl = local('api-url')?.replace(/\/+$/, '');
  const toSession =
    sessionUrl === undefined
      ? ['127.0.0.1', 'localhost', '[::1]'].includes(parsed.hostname)
      : url === sessionUrl;
  token ??= c.token ?? (toSession ? local('api-token') : undefined);
  return {
    url,
    token,
    nats: flags.nats ?? env.NATS_URL ?? c.nats ?? local('nats-url') ?? 'nats://127.0.0.1:4222',
    ...(env.NATS_USER ? { natsUser: env.NATS_USER, natsPassword: env.NATS_PASSWORD ?? '' } : {}),
  };
}

const statusExit = (status: number): ExitCode =>
  status === 401 || status === 403
    ? EXIT.auth
    : status === 404
      ? EXIT.notFound
      : status === 409
        ? EXIT.conflict
        : status === 422
          ? EXIT.invalid
          : status >= 500
            ? EXIT.unavailable
            : EXIT.usage;

/** Calls the REST API; a non-2xx answer becomes a CliError carrying the API's error body. */
export async function call(
  s: ClientSettings,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const h: Record<string, string> = { ...headers };
  if (s.token !== undefined) h.authorization = `Bearer ${s.token}`;
  if (body !== undefined) h['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(`${s.url}/v1${path}`, {
      method,
      headers: h,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new CliError(
      EXIT.unavailable,
      `cannot reach ${s.url}: ${(e as Error).cause instanceof Error ? ((e as Error).cause as Error).message : (e as Error).message}; set --url or VIGIL_URL`,
    );
  }
  const text = await res.text();
  let parsed: Record<string, unknown> = {};
  try {
    parsed = JSON.parse(text) as Record<string, unknown>;
  } catch {
    parsed = { text };
  }
  if (!res.ok) {
    const err = parsed.error as
      | { message?: string; details?: { problems?: { pointer: string; message: string }[] } }
      | undefined;
    const problems =
      err?.details?.problems?.map((p) => `\n  ${p.pointer || '/'}: ${p.message}`).join('') ?? '';
    throw new CliError(
      statusExit(res.status),
      `${err?.message ?? `HTTP ${res.status}`}${problems}`,
      parsed,
    );
  }
  return { status: res.status, body: parsed };
}
