import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
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

/** `node dist/scripts/start.js ARGS` in the clone the first test built, in a process group of its own. */
function startBuilt(args: string[], stdio: 'pipe' | 'ignore'): ChildProcess {
  const proc = spawn(process.execPath, ['dist/scripts/start.js', ...args], {
    cwd: join(dir as string, 'vigil'),
    env: { ...process.env, VIGIL_HTTP_PORT: '0', VIGIL_WORKERS: '1', NATS_URL: '', REDIS_URL: '' },
    stdio: ['ignore', 'pipe', stdio],
    detached: true,
  });
  children.push(proc);
  return proc;
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
      env: {
        ...process.env,
        VIGIL_HTTP_PORT: '0',
        VIGIL_WORKERS: '2',
        NATS_URL: '',
        REDIS_URL: '',
      },
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
    const running = descendants(proc.pid as number);
    expect(running.length).toBeGreaterThan(2); // npm, node, nats-server, redis-server
    process.kill(-(proc.pid as number), 'SIGINT');
    await new Promise<void>((r) => (proc.exitCode !== null ? r() : proc.once('exit', () => r())));
    await new Promise((r) => setTimeout(r, 500));
    const alive = running.filter((pid) => spawnSync('kill', ['-0', String(pid)]).status === 0);
    expect(alive, `processes left behind:\n${output}`).toEqual([]);
    expect(output).toContain('stopped');
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
});
