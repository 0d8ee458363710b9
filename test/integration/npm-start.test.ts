import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { afterAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
let dir: string | undefined;
/** Each test's start, a process group of its own. */
const children: ChildProcess[] = [];

afterAll(async () => {
  // On a failure, take down every whole process group: npm, the start script and the servers it
  // started, which outlive a start script that died (their group is still there).
  for (const child of children) {
    if (child.pid === undefined) continue;
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Descendants of a process, from /proc (what `npm start` must not leave behind). */
function descendants(pid: number): number[] {
  const r = spawnSync('ps', ['-eo', 'pid=,ppid='], { encoding: 'utf8' });
  const children = new Map<number, number[]>();
  for (const line of r.stdout.trim().split('\n')) {
    const [p, pp] = line.trim().split(/\s+/).map(Number);
    if (p === undefined || pp === undefined) continue;
    children.set(pp, [...(children.get(pp) ?? []), p]);
  }
  const out: number[] = [];
  const walk = (p: number): void => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}

/**
 * The environment of a start in a test: every port a free one (the defaults may be taken on a
 * machine that runs tests), one worker, the servers started, not found in the test's environment.
 */
const START_ENV = {
  VIGIL_HTTP_PORT: '0',
  VIGIL_NATS_PORT: '0',
  VIGIL_REDIS_PORT: '0',
  VIGIL_WORKERS: '1',
  NATS_URL: '',
  REDIS_URL: '',
} as const;

/** `node dist/scripts/start.js ARGS` in the clone the first test built, in a process group of its own. */
function startBuilt(
  args: string[],
  stdio: 'pipe' | 'ignore',
  env: Record<string, string> = {},
): ChildProcess {
  const proc = spawn(process.execPath, ['dist/scripts/start.js', ...args], {
    cwd: join(dir as string, 'vigil'),
    env: { ...process.env, ...START_ENV, ...env },
    stdio: ['ignore', 'pipe', stdio],
    detached: true,
  });
  children.push(proc);
  return proc;
}

/**
 * Records every nats-server and redis-server that `proc` starts, by pid, while it runs (they are
 * its children; they leave its process group, so they are looked for among its descendants).
 */
function watchServers(proc: ChildProcess): { readonly pids: Set<number>; stop(): void } {
  const pids = new Set<number>();
  const look = (): void => {
    if (proc.pid === undefined) return;
    const mine = new Set(descendants(proc.pid));
    const r = spawnSync('ps', ['-eo', 'pid=,comm='], { encoding: 'utf8' });
    for (const line of r.stdout.trim().split('\n')) {
      const [pid, comm] = line.trim().split(/\s+/);
      if ((comm === 'nats-server' || comm === 'redis-server') && mine.has(Number(pid)))
        pids.add(Number(pid));
    }
  };
  look();
  const timer = setInterval(look, 25);
  return { pids, stop: () => clearInterval(timer) };
}

/** The pids of `pids` still running (a zombie, dead but not yet reaped by PID 1, is not running). */
function stillRunning(pids: Iterable<number>): number[] {
  return [...pids].filter((pid) => {
    const r = spawnSync('ps', ['-o', 'stat=', '-p', String(pid)], { encoding: 'utf8' });
    return r.status === 0 && !r.stdout.trim().startsWith('Z');
  });
}

/** The pids of the servers a start says it started ("nats-server nats://… (pid N, …"). */
function serverPids(output: string): number[] {
  return [...output.matchAll(/^\[vigil\] (?:nats|redis)-server \S+ \(pid (\d+)/gm)].map((m) =>
    Number(m[1]),
  );
}

/** The process group of `pid`. */
function processGroup(pid: number): number {
  return Number(spawnSync('ps', ['-o', 'pgid=', '-p', String(pid)], { encoding: 'utf8' }).stdout);
}

/** Resolves with the exit code once `proc` has exited, or rejects after `ms`. */
function exitOf(proc: ChildProcess, ms: number): Promise<number | null> {
  return new Promise((resolve, reject) => {
    if (proc.exitCode !== null) return resolve(proc.exitCode);
    const timer = setTimeout(() => reject(new Error(`still running after ${ms} ms`)), ms);
    proc.once('exit', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

/** stdout and stderr of `proc` as they arrive, and both together. */
function outputOf(proc: ChildProcess): { out: string; err: string; all: string } {
  const o = { out: '', err: '', all: '' };
  proc.stdout?.on('data', (c: Buffer) => {
    o.out += c.toString();
    o.all += c.toString();
  });
  proc.stderr?.on('data', (c: Buffer) => {
    o.err += c.toString();
    o.all += c.toString();
  });
  return o;
}

async function until(what: string, check: () => boolean, output: () => string, ms = 90_000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}:\n${output()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Listens on a free loopback port, as another program would (closed in the test's `finally`). */
async function holdPort(): Promise<{ port: number; server: Server }> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { port: (server.address() as { port: number }).port, server };
}

describe('npm start, as a new user runs it', () => {
  it('from a clean clone: starts the servers and the service, the demo produces alerts, /metrics answers, Ctrl-C stops everything', async () => {
    dir = mkdtempSync(join(tmpdir(), 'vigil-clone-'));
    const clone = spawnSync(
      'git',
      ['clone', '--quiet', '--depth', '1', `file://${root}`, join(dir, 'vigil')],
      { encoding: 'utf8' },
    );
    expect(clone.status, clone.stderr).toBe(0);
    const cwd = join(dir, 'vigil');
    // The dependencies are installed already; a clean machine gets them from `npm ci` in the same script.
    symlinkSync(join(root, 'node_modules'), join(cwd, 'node_modules'));
    const proc = spawn('npm', ['start'], {
      cwd,
      env: { ...process.env, ...START_ENV, VIGIL_WORKERS: '2' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    children.push(proc);
    let output = '';
    proc.stdout?.on('data', (c: Buffer) => (output += c.toString()));
    proc.stderr?.on('data', (c: Buffer) => (output += c.toString()));
    const until = Date.now() + 90_000;
    while (!/ALERT/.test(output) || !/metrics:\s+(\S+)/.test(output)) {
      if (Date.now() > until || proc.exitCode !== null)
        throw new Error(`no alert from the demo:\n${output}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    const metricsUrl = /metrics:\s+(\S+)/.exec(output)?.[1] as string;
    let text = '';
    for (let i = 0; i < 50 && !/vigil_alerts_total\{rule="[a-z-]+"\} [1-9]/.test(text); i++) {
      const metrics = await fetch(metricsUrl);
      expect(metrics.status).toBe(200);
      text = await metrics.text();
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(text).toMatch(/vigil_alerts_total\{rule="[a-z-]+"\} [1-9]/);

    // GET /: a page of links, each of which answers.
    const base = metricsUrl.replace(/\/metrics$/, '');
    const home = await fetch(`${base}/`);
    expect(home.status).toBe(200);
    expect(home.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await home.text();
    const hrefs = [...html.matchAll(/<a href="([^"]+)">/g)].map((m) => m[1] as string);
    expect(hrefs).toEqual(
      expect.arrayContaining(['v1/openapi.json', 'v1/status', 'metrics', 'healthz', 'readyz']),
    );
    expect(html).toContain('docs/api.md');
    const token = readFileSync(join(cwd, '.vigil/api-token'), 'utf8').trim();
    for (const href of hrefs) {
      const r = await fetch(new URL(href, `${base}/`), {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(r.status, href).toBe(200);
    }

    // The CLI finds the API (on a port that is not 8080) and NATS in .vigil/, with nothing set.
    expect(readFileSync(join(cwd, '.vigil/api-url'), 'utf8').trim()).toBe(base);
    expect(base).not.toMatch(/:8080$/);
    const home2 = mkdtempSync(join(dir, 'home-'));
    const cliEnv = { PATH: process.env.PATH ?? '', HOME: home2 };
    // `npx vigil …` runs this (without npm's own start-up and notices).
    const vigilBin = [join(cwd, 'control-plane/vigil.mjs')];
    const list = spawnSync(process.execPath, [...vigilBin, 'rules', 'list'], {
      cwd,
      env: cliEnv,
      encoding: 'utf8',
    });
    expect(list.status, list.stdout + list.stderr).toBe(0);
    expect(list.stdout).toContain('big-payment');
    const tail = spawnSync(
      process.execPath,
      [...vigilBin, 'alerts', 'tail', '--from-start', '--limit', '1'],
      {
        cwd,
        env: cliEnv,
        encoding: 'utf8',
        timeout: 30_000,
      },
    );
    expect(tail.status, tail.stdout + tail.stderr).toBe(0);
    expect(tail.stdout).toMatch(/big-payment|blocked-card|card-testing|login-then-drain/);

    const running = descendants(proc.pid as number);
    expect(running.length).toBeGreaterThan(2); // npm, node, nats-server, redis-server
    process.kill(-(proc.pid as number), 'SIGINT');
    await new Promise<void>((r) => (proc.exitCode !== null ? r() : proc.once('exit', () => r())));
    await new Promise((r) => setTimeout(r, 500));
    const alive = running.filter((pid) => spawnSync('kill', ['-0', String(pid)]).status === 0);
    expect(alive, `processes left behind:\n${output}`).toEqual([]);
    expect(output).toContain('stopped');
    // The URL of a session that has ended is not left for the CLI to find.
    expect(existsSync(join(cwd, '.vigil/api-url'))).toBe(false);
  });

  it('stops the servers it started when its output is closed (npm start | head)', async () => {
    const proc = startBuilt(['--no-demo'], 'ignore');
    // As `head` does: read the first lines, then close the pipe.
    const servers = await new Promise<number[]>((resolve, reject) => {
      let output = '';
      proc.stdout?.on('data', (c: Buffer) => {
        output += c.toString();
        if (/redis-server redis:/.test(output)) resolve(descendants(proc.pid as number));
      });
      proc.once('exit', () => reject(new Error(`start ended before its servers ran:\n${output}`)));
    });
    expect(servers.length).toBeGreaterThanOrEqual(2); // nats-server, redis-server
    proc.stdout?.destroy();
    const exited = await new Promise<boolean>((r) => {
      const timer = setTimeout(() => r(false), 60_000);
      proc.once('exit', () => {
        clearTimeout(timer);
        r(true);
      });
    });
    expect(exited, 'start.js still running 60 s after its output closed').toBe(true);
    await new Promise((r) => setTimeout(r, 500));
    const alive = servers.filter((pid) => spawnSync('kill', ['-0', String(pid)]).status === 0);
    expect(alive, 'servers left behind').toEqual([]);
  }, 90_000);

  it('with --nats-auth: users and permissions, the demo running as its users, and a producer refused ticks', async () => {
    const cwd = join(dir as string, 'vigil');
    const proc = startBuilt(['--nats-auth'], 'pipe');
    let output = '';
    proc.stdout?.on('data', (c: Buffer) => (output += c.toString()));
    proc.stderr?.on('data', (c: Buffer) => (output += c.toString()));
    const until = Date.now() + 90_000;
    while (!/ALERT/.test(output) || !/Ctrl-C stops everything/.test(output)) {
      if (Date.now() > until || proc.exitCode !== null)
        throw new Error(`no alert from the demo:\n${output}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    // The printed example publishes as the producer; its password is in .vigil/nats-users.json.
    const users = JSON.parse(readFileSync(join(cwd, '.vigil/nats-users.json'), 'utf8')) as Record<
      string,
      string
    >;
    // It names the file, not the password.
    expect(output).toContain(
      `NATS_USER=producer NATS_PASSWORD="$(node -p "require('./.vigil/nats-users.json').producer")" npm run pub`,
    );
    expect(output).not.toContain(users.producer);
    // The printed command works as written.
    const pub = spawnSync(
      'bash',
      [
        '-c',
        `NATS_URL=${/nats-server (nats:\S+)/.exec(output)?.[1]} NATS_USER=producer NATS_PASSWORD="$(node -p "require('./.vigil/nats-users.json').producer")" node --import tsx scripts/pub.ts events.c-7 '{"type":"payment","amount":950}'`,
      ],
      { cwd, encoding: 'utf8' },
    );
    expect(pub.stdout + pub.stderr).toContain('stored in EVENTS');
    const url = /nats-server (nats:\S+)/.exec(output)?.[1] as string;
    const producer = await connect({ servers: url, user: 'producer', pass: users.producer });
    try {
      const js = jetstream(producer);
      expect((await js.publish('events.k1', '{"type":"payment"}')).stream).toBe('EVENTS');
      await expect(
        js.publish('events._tick.0', '{"vigil":"tick","ts":1}', { timeout: 1000 }),
      ).rejects.toThrow();
      await expect(
        js.publish('vigil.control', '{"op":"clear-state"}', { timeout: 1000 }),
      ).rejects.toThrow();
    } finally {
      await producer.close();
    }
    await expect(connect({ servers: url, reconnect: false })).rejects.toThrow();
    const running = descendants(proc.pid as number);
    process.kill(-(proc.pid as number), 'SIGINT');
    await new Promise<void>((r) => (proc.exitCode !== null ? r() : proc.once('exit', () => r())));
    await new Promise((r) => setTimeout(r, 500));
    const alive = running.filter((pid) => spawnSync('kill', ['-0', String(pid)]).status === 0);
    expect(alive, `processes left behind:\n${output}`).toEqual([]);
  }, 120_000);

  it('refuses at once, in one line per port, when a port it needs is taken, and starts nothing', async () => {
    const held = await holdPort();
    try {
      // The HTTP port taken: once, nats-server and redis-server started, and redis-server outlived
      // an EADDRINUSE stack trace.
      const proc = startBuilt(['--no-demo'], 'pipe', { VIGIL_HTTP_PORT: String(held.port) });
      const watch = watchServers(proc);
      const o = outputOf(proc);
      const code = await exitOf(proc, 30_000);
      watch.stop();
      expect(code, o.all).toBe(2);
      const lines = o.err.trim().split('\n');
      expect(lines, o.all).toEqual([
        `[vigil] cannot start: port ${held.port} on 127.0.0.1 (the service's HTTP server) is in use: set VIGIL_HTTP_PORT to another port (0: any free one)`,
        '[vigil] nothing was started',
      ]);
      expect(o.out).toBe('');
      expect([...watch.pids], 'servers started').toEqual([]);

      // Every port taken (as by an earlier npm start still running): each named, with its setting.
      const all = startBuilt(['--no-demo'], 'pipe', {
        VIGIL_HTTP_PORT: String(held.port),
        VIGIL_NATS_PORT: String(held.port),
        VIGIL_REDIS_PORT: '0',
      });
      const o2 = outputOf(all);
      expect(await exitOf(all, 30_000)).toBe(2);
      expect(o2.err).toContain(
        `nats-server and the service's HTTP server would both listen on port ${held.port}; set VIGIL_NATS_PORT or VIGIL_HTTP_PORT`,
      );
      const redis = startBuilt(['--no-demo'], 'pipe', { VIGIL_REDIS_PORT: String(held.port) });
      const o3 = outputOf(redis);
      expect(await exitOf(redis, 30_000)).toBe(2);
      expect(o3.err).toContain(
        `[vigil] cannot start: port ${held.port} on 127.0.0.1 (redis-server) is in use: set VIGIL_REDIS_PORT to another port (0: any free one), or REDIS_URL to use a redis-server you run`,
      );
      expect(o3.err).not.toMatch(/^\s+at /m);
    } finally {
      held.server.close();
    }
  }, 60_000);

  it('Ctrl-C soon after start: stops the service, then its servers, within seconds and without errors', async () => {
    const proc = startBuilt([], 'pipe');
    const o = outputOf(proc);
    await until(
      'the demo',
      () => /Ctrl-C stops everything/.test(o.out),
      () => o.all,
    );
    await new Promise((r) => setTimeout(r, 1000));
    const servers = serverPids(o.out);
    expect(servers, o.all).toHaveLength(2);
    expect(stillRunning(servers)).toEqual(servers);
    // Each server leads a process group of its own, away from the terminal's.
    for (const pid of servers) expect(processGroup(pid), `group of ${pid}`).toBe(pid);
    // What a terminal does: SIGINT to its foreground process group. The servers are in groups of
    // their own: they do not get it, and stop only once the service has stopped.
    const sent = Date.now();
    process.kill(-(proc.pid as number), 'SIGINT');
    const code = await exitOf(proc, 30_000);
    const took = Date.now() - sent;
    expect(code, o.all).toBe(0);
    expect(took, o.all).toBeLessThan(5000);
    expect(o.out).toMatch(/stopping …[\s\S]*stopped\n$/);
    // Errors and warnings go to stderr: none, and no checkpoint, lease or Redis trouble anywhere.
    expect(o.err, o.all).toBe('');
    expect(o.out).not.toMatch(
      /checkpoint.*(fail|error)|lease (lost|.*fail)|ECONNREFUSED|redis.*(error|closed)/i,
    );
    await new Promise((r) => setTimeout(r, 200));
    expect(stillRunning(servers), 'servers left running').toEqual([]);
  }, 120_000);

  it('a service that fails to start (partitions changed): says why in a line, stops the servers it started', async () => {
    // .vigil/nats holds EVENTS with 16 partitions from the tests above: 4 cannot use it.
    const proc = startBuilt(['--no-demo'], 'pipe', { VIGIL_PARTITIONS: '4' });
    const o = outputOf(proc);
    const code = await exitOf(proc, 90_000);
    expect(code, o.all).toBe(1);
    expect(o.err, o.all).toMatch(
      /^\[vigil\] cannot start: stream EVENTS has the subjects .* VIGIL_PARTITIONS=4 .*$/m,
    );
    expect(o.err).not.toMatch(/^\s+at /m);
    const servers = serverPids(o.out);
    expect(servers, o.all).toHaveLength(2);
    await new Promise((r) => setTimeout(r, 200));
    expect(stillRunning(servers), 'servers left running').toEqual([]);
  }, 120_000);

  it('killed outright (SIGKILL, no handler runs): its servers do not outlive it', async () => {
    const proc = startBuilt(['--no-demo'], 'pipe');
    const o = outputOf(proc);
    await until(
      'the service',
      () => /service ready/.test(o.out),
      () => o.all,
    );
    const servers = serverPids(o.out);
    expect(servers, o.all).toHaveLength(2);
    try {
      process.kill(proc.pid as number, 'SIGKILL');
      await exitOf(proc, 10_000);
      // The kernel sends them SIGTERM as their parent dies (setpriv --pdeathsig).
      const end = Date.now() + 10_000;
      while (stillRunning(servers).length > 0 && Date.now() < end)
        await new Promise((r) => setTimeout(r, 100));
      expect(stillRunning(servers), 'servers left running').toEqual([]);
    } finally {
      for (const pid of stillRunning(servers)) process.kill(pid, 'SIGKILL');
    }
  }, 120_000);
});
