import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { partitionMapping } from '../protocol/index.js';
import { ServiceError, ServiceErrorCode } from '../service/index.js';

/** A server process this module started. */
export interface ServerHandle {
  readonly name: 'nats-server' | 'redis-server';
  readonly url: string;
  readonly port: number;
  readonly process: ChildProcess;
  /** Stops the server (SIGTERM) and waits until the process has exited. */
  stop(): Promise<void>;
}

const SEARCH_PATH = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

/** Finds an executable on PATH or in the usual system folders (Debian puts nats-server in /usr/sbin). */
export function findExecutable(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(':').filter(Boolean), ...SEARCH_PATH];
  return dirs.map((d) => join(d, name)).find((p) => existsSync(p));
}

/** Whether this process has run `apt-get update` successfully (it is run at most once). */
let aptUpdated = false;

/**
 * Installs Debian packages with apt-get (`apt-get update` first, once per process). Only as root
 * where apt-get is: elsewhere throws `unavailable`, which says what to install by hand.
 */
function aptInstall(
  packages: readonly string[],
  o: {
    /** What the log line says is being installed. */
    readonly what: string;
    readonly unavailable: string;
    readonly flags?: readonly string[];
    readonly log: (line: string) => void;
  },
): void {
  const apt = findExecutable('apt-get');
  if (apt === undefined || process.getuid?.() !== 0)
    throw new ServiceError(ServiceErrorCode.ServersMissing, o.unavailable);
  o.log(`installing ${o.what} with apt-get …`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  if (!aptUpdated)
    aptUpdated = spawnSync(apt, ['update', '-qq'], { stdio: 'inherit', env }).status === 0;
  const install = spawnSync(apt, ['install', '-y', '-qq', ...(o.flags ?? []), ...packages], {
    stdio: 'inherit',
    env,
  });
  if (install.status !== 0)
    throw new ServiceError(
      ServiceErrorCode.ServersMissing,
      `apt-get could not install ${packages.join(' ')} (exit ${install.status}); install ${packages.length === 1 ? 'it' : 'them'} by hand`,
    );
}

/** Where each of `names` is, once installed; throws when one is still missing. */
function installed<N extends string>(names: readonly N[]): Record<N, string> {
  const paths = {} as Record<N, string>;
  for (const name of names) {
    const path = findExecutable(name);
    if (path === undefined)
      throw new ServiceError(
        ServiceErrorCode.ServersMissing,
        `${names.join(' or ')} is still missing after installing`,
      );
    paths[name] = path;
  }
  return paths;
}

/**
 * Makes sure nats-server and redis-server are installed: on Debian/Ubuntu as root, installs the
 * missing ones with apt-get (their packages are named as the programs); elsewhere throws an error
 * that says what to install.
 */
export function ensureServersInstalled(log: (line: string) => void = () => {}): {
  nats: string;
  redis: string;
} {
  const missing = ['nats-server', 'redis-server'].filter(
    (bin) => findExecutable(bin) === undefined,
  );
  if (missing.length > 0)
    aptInstall(missing, {
      what: missing.join(', '),
      unavailable: `${missing.join(' and ')} not found; install them (Debian/Ubuntu: sudo apt-get install ${missing.join(' ')}; nats-server 2.9+ with JetStream), or set NATS_URL and REDIS_URL to servers you run`,
      log,
    });
  const { 'nats-server': nats, 'redis-server': redis } = installed(['nats-server', 'redis-server']);
  return { nats, redis };
}

/**
 * Makes sure Prometheus and promtool are installed (Debian's `prometheus` package, which ships
 * both): used by the dashboard and alerting-rule tests, not by the service. Installed without the
 * recommended node exporter; the package's own system service is not used (tests start their own
 * server on loopback), so it does not matter that it cannot start where there is no systemd.
 */
export function ensurePrometheusInstalled(log: (line: string) => void = () => {}): {
  prometheus: string;
  promtool: string;
} {
  if (findExecutable('prometheus') === undefined || findExecutable('promtool') === undefined)
    aptInstall(['prometheus'], {
      what: 'prometheus (prometheus, promtool)',
      unavailable:
        'prometheus or promtool not found; install them (Debian/Ubuntu: sudo apt-get install --no-install-recommends prometheus; Prometheus 2.x)',
      flags: ['--no-install-recommends'],
      log,
    });
  return installed(['prometheus', 'promtool']);
}

/** A free TCP port on loopback (redis-server cannot pick a random port itself). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() =>
        typeof addr === 'object' && addr !== null
          ? resolve(addr.port)
          : reject(new Error('no port')),
      );
    });
  });
}

/** nats-server's `max_payload` in the configurations Vigil writes: room for an 8 MiB control message and its headers. */
export const NATS_MAX_PAYLOAD = '9MB';

/** Passwords of the four NATS users of a server with permissions (see {@link natsAccounts}). */
export interface NatsUsers {
  /** The service and its REST API: everything in the account. */
  readonly vigil: string;
  /** People and tools that change rules: control messages, and reading `CONTROL`. */
  readonly operator: string;
  /** Event producers: events only (no control messages, epoch markers, ticks or probes). */
  readonly producer: string;
  /** Alert consumers: reading `ALERTS` only. */
  readonly alerts: string;
}

/**
 * The `accounts` block of a nats-server with Vigil's users and permissions: one account with
 * JetStream and the partition mapping, and the four users of {@link NatsUsers}. The shipped
 * `control-plane/nats-auth.example.conf` is this block with example passwords (a unit test keeps
 * them equal). nats-server 2.9 checks a publish against the subject after the mapping, so a
 * producer's `events.<key>` is checked as `events.<key>.<p>` (allowed) and `events._vigil` as
 * `events._vigil.<p>` (denied).
 */
export function natsAccounts(partitions: number, users: NatsUsers): string {
  const probes = Array.from({ length: 16 }, (_, i) => `"events._probe${i === 0 ? '' : i}.*"`);
  const rows = (xs: string[], per: number, indent: string): string => {
    const out: string[] = [];
    for (let i = 0; i < xs.length; i += per) out.push(indent + xs.slice(i, i + per).join(', '));
    return out.join(',\n');
  };
  const list = (xs: string[], indent: string): string =>
    xs.map((x) => `${indent}${JSON.stringify(x)}`).join(',\n');
  const consumerOf = (stream: string, ack: boolean): string[] => [
    '$JS.API.INFO',
    `$JS.API.STREAM.INFO.${stream}`,
    ...(stream === 'CONTROL' ? [`$JS.API.STREAM.MSG.GET.${stream}`] : []),
    `$JS.API.CONSUMER.*.${stream}.>`,
    `$JS.API.CONSUMER.MSG.NEXT.${stream}.>`,
    ...(ack ? [`$JS.ACK.${stream}.>`] : []),
    `$JS.FC.${stream}.>`,
  ];
  const i = '          ';
  return `accounts {
  VIGIL {
    jetstream: enabled
    # The partition mapping, inside the account that publishes events.
    ${partitionMapping(partitions)}
    users = [
      { user: vigil, password: ${JSON.stringify(users.vigil)} }
      {
        user: operator, password: ${JSON.stringify(users.operator)}
        permissions: {
          publish: {
            allow: [
${list(['vigil.control', ...consumerOf('CONTROL', false)], `${i}    `)}
            ]
          }
          subscribe: { allow: ["_INBOX.>"] }
        }
      }
      {
        user: producer, password: ${JSON.stringify(users.producer)}
        permissions: {
          publish: {
            allow: ["events.*.*"]
            # The service's start-up probes publish to events._probe, events._probe1 …
            # events._probe15 (service/ingest/streams.ts verifyMapping: always these 16 keys, whatever
            # the partition count). NATS's "*" matches a whole token only, so each is listed.
            deny: [
${i}    "events._vigil.*", "events._tick.*",
${rows(probes, 4, `${i}    `)}
            ]
          }
          # JetStream acknowledgements come back on an inbox.
          subscribe: { allow: ["_INBOX.>"] }
        }
      }
      {
        user: alerts, password: ${JSON.stringify(users.alerts)}
        permissions: {
          publish: {
            allow: [
${list(consumerOf('ALERTS', true), `${i}    `)}
            ]
          }
          subscribe: { allow: ["_INBOX.>"] }
        }
      }
    ]
  }
}
`;
}

/**
 * The nats-server configuration Vigil needs: loopback, JetStream in `storeDir`, the partition
 * mapping; with `users`, the accounts and permissions of {@link natsAccounts} instead of the
 * bare mapping. `port` -1 lets the server choose a free port.
 */
export function natsConfig(opts: {
  port: number;
  storeDir: string;
  partitions: number;
  users?: NatsUsers;
  /** `max_payload`; default {@link NATS_MAX_PAYLOAD}. */
  maxPayload?: string;
}): string {
  return [
    '# Vigil: nats-server with JetStream and the partition mapping of events into partitions.',
    'host: 127.0.0.1',
    `port: ${opts.port}`,
    `jetstream { store_dir: ${JSON.stringify(opts.storeDir)} }`,
    // Control messages carry models of up to 8 MiB (maxControlBytes) plus headers.
    `max_payload: ${opts.maxPayload ?? NATS_MAX_PAYLOAD}`,
    opts.users === undefined
      ? partitionMapping(opts.partitions)
      : natsAccounts(opts.partitions, opts.users).trimEnd(),
    '',
  ].join('\n');
}

/**
 * Servers this process started and that have not exited: stopped when it exits, whatever the
 * path (see {@link spawnServer}).
 */
const live = new Set<ChildProcess>();

/** Sends `signal` to a server's process group (its own, see {@link spawnServer}); false if it is gone. */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals): boolean {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return false;
  try {
    process.kill(-child.pid, signal);
    return true;
  } catch {
    // Its group is gone (or was never made): the process itself.
    return child.kill(signal);
  }
}

/**
 * Starts a server in a process group of its own (`detached`), so that the terminal's Ctrl-C
 * reaches only the process that started it, which stops the service before its servers (were
 * they in the terminal's group, they would stop at once, under the service's last checkpoint and
 * lease release). A server must still not outlive its parent: on Linux it is started through
 * `setpriv --pdeathsig SIGTERM` (util-linux), so the kernel stops it when its parent dies, even by
 * SIGKILL; and when this process exits by any path that runs the `exit` handlers, the groups of
 * its servers still running get SIGTERM.
 */
function spawnServer(exe: string, args: string[]): ChildProcess {
  const setpriv = process.platform === 'linux' ? findExecutable('setpriv') : undefined;
  const [file, argv] =
    setpriv === undefined ? [exe, args] : [setpriv, ['--pdeathsig', 'SIGTERM', '--', exe, ...args]];
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const child of live) signalGroup(child, 'SIGTERM');
    });
  }
  const child = spawn(file, argv, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  live.add(child);
  child.once('exit', () => live.delete(child));
  // An executable that cannot be started (waitForLine reports it).
  child.once('error', () => live.delete(child));
  return child;
}
let exitHookInstalled = false;

/** The pids of the servers this process started that are still running (nats-server, redis-server). */
export function runningServerPids(): number[] {
  return [...live].flatMap((c) => (c.pid === undefined ? [] : [c.pid]));
}

function handle(
  name: ServerHandle['name'],
  url: string,
  port: number,
  child: ChildProcess,
): ServerHandle {
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  return {
    name,
    url,
    port,
    process: child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

function waitForLine(
  child: ChildProcess,
  name: string,
  pattern: RegExp,
  timeoutMs: number,
): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const onData = (chunk: Buffer): void => {
      seen += chunk.toString();
      const m = pattern.exec(seen);
      if (m) {
        cleanup();
        resolve(m);
      }
    };
    const onExit = (code: number | null): void => {
      cleanup();
      reject(
        new ServiceError(
          ServiceErrorCode.ServerStart,
          `${name} exited (code ${code}) before it was ready:\n${seen.slice(-2000)}`,
        ),
      );
    };
    const onError = (e: Error): void => {
      cleanup();
      reject(
        new ServiceError(
          ServiceErrorCode.ServerStart,
          `${name} could not be started: ${e.message}`,
          {
            cause: e,
          },
        ),
      );
    };
    const timer = setTimeout(() => {
      cleanup();
      child.kill('SIGKILL');
      reject(
        new ServiceError(
          ServiceErrorCode.ServerStart,
          `${name} was not ready within ${timeoutMs} ms:\n${seen.slice(-2000)}`,
          { retryable: true },
        ),
      );
    }, timeoutMs);
    const cleanup = (): void => {
      clearTimeout(timer);
      child.stdout?.off('data', onData);
      child.stderr?.off('data', onData);
      child.off('exit', onExit);
      child.off('error', onError);
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', onExit);
    child.once('error', onError);
  });
}

/**
 * Starts nats-server on loopback with JetStream data under `dataDir` and the partition mapping
 * for `partitions`. Port 0 lets the server pick a free one. Resolves once it accepts clients.
 */
export async function startNats(opts: {
  dataDir: string;
  partitions: number;
  port?: number;
  executable?: string;
  /** Users and permissions (see {@link natsAccounts}); none: a server without users. */
  users?: NatsUsers;
  /** `max_payload` (default {@link NATS_MAX_PAYLOAD}): a test may start a server with NATS's default. */
  maxPayload?: string;
}): Promise<ServerHandle> {
  mkdirSync(opts.dataDir, { recursive: true });
  const storeDir = join(opts.dataDir, 'jetstream');
  const confPath = join(opts.dataDir, 'nats.conf');
  // With users, the file holds their passwords: readable by its owner only.
  const mode = opts.users === undefined ? 0o644 : 0o600;
  writeFileSync(
    confPath,
    natsConfig({
      port: opts.port === undefined || opts.port === 0 ? -1 : opts.port,
      storeDir,
      partitions: opts.partitions,
      ...(opts.users === undefined ? {} : { users: opts.users }),
      ...(opts.maxPayload === undefined ? {} : { maxPayload: opts.maxPayload }),
    }),
    { mode },
  );
  chmodSync(confPath, mode);
  const exe = opts.executable ?? findExecutable('nats-server') ?? 'nats-server';
  const child = spawnServer(exe, ['-c', confPath]);
  const m = await waitForLine(
    child,
    'nats-server',
    /Listening for client connections on [^\s]*:(\d+)[\s\S]*Server is ready/,
    30_000,
  );
  const port = Number(m[1]);
  child.stdout?.resume();
  child.stderr?.resume();
  return handle('nats-server', `nats://127.0.0.1:${port}`, port, child);
}

/** Starts redis-server on loopback with its data (append-only file) under `dataDir`. */
export async function startRedis(opts: {
  dataDir: string;
  port?: number;
  executable?: string;
}): Promise<ServerHandle> {
  mkdirSync(opts.dataDir, { recursive: true });
  const port = opts.port === undefined || opts.port === 0 ? await freePort() : opts.port;
  const exe = opts.executable ?? findExecutable('redis-server') ?? 'redis-server';
  const args = [
    '--bind',
    '127.0.0.1',
    '--port',
    String(port),
    '--dir',
    opts.dataDir,
    '--appendonly',
    'yes',
    '--save',
    '',
    '--daemonize',
    'no',
    '--protected-mode',
    'yes',
  ];
  const child = spawnServer(exe, args);
  await waitForLine(child, 'redis-server', /Ready to accept connections/, 30_000);
  child.stdout?.resume();
  child.stderr?.resume();
  return handle('redis-server', `redis://127.0.0.1:${port}`, port, child);
}
