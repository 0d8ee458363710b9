import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, cpSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findExecutable, freePort } from '../../scripts/local-servers.js';
import { dockerStages, execForm, stageEnv } from '../dockerfile.js';
import { startTestServers, type TestServers } from './servers.js';

/**
 * No Docker engine here, so the Dockerfile is played by hand: its build stage's COPY and npm
 * steps in a folder, its final stage's COPY --from=build into another, then its CMD run there as
 * an unprivileged user against real servers until its HEALTHCHECK passes. That catches a runtime
 * dependency among the devDependencies, a folder the service imports but the image lacks, or
 * files the service user would need to write.
 */
describe('the image, played without Docker', () => {
  const root = mkdtempSync(join(tmpdir(), 'vigil-image-'));
  chmodSync(root, 0o755);
  let servers: TestServers | undefined;
  afterAll(async () => {
    await servers?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  /** COPY <sources…> <dest> with paths resolved by `from`, into `dir`. */
  function copy(dir: string, args: string[], from: (src: string) => string): void {
    const dest = args.at(-1) ?? '';
    const sources = args.slice(0, -1);
    for (const src of sources) {
      const target = dest.endsWith('/') ? join(dir, dest, basename(src)) : join(dir, dest);
      cpSync(from(src), target, { recursive: true });
    }
  }

  it('the final stage starts the service as a non-root user, and its HEALTHCHECK passes', async () => {
    const stages = dockerStages();
    const build = stages[0];
    const final = stages.at(-1);
    if (build === undefined || final === undefined || build === final)
      throw new Error('expected a build stage and a final stage');
    const buildDir = join(root, 'build');
    const appDir = join(root, 'app');
    mkdirSync(buildDir);
    mkdirSync(appDir);

    for (const l of build.lines) {
      const [op, ...args] = l.split(/\s+/);
      if (op === 'WORKDIR' || op === 'ENV') continue;
      if (op === 'COPY') copy(buildDir, args, (src) => src);
      else if (op === 'RUN' && args[0] === 'npx' && args[1] === 'tsc') {
        // The type check: `npm run typecheck` checks a superset of these files in every npm test.
      } else if (op === 'RUN' && args[0] === 'npm') {
        const r = spawnSync('npm', args.slice(1), {
          cwd: buildDir,
          encoding: 'utf8',
          // The lock file's packages are in npm's cache after `npm ci` of the checkout.
          env: { ...process.env, npm_config_prefer_offline: 'true' },
          timeout: 240_000,
        });
        expect(r.status, `${l}\n${r.stdout}${r.stderr}`).toBe(0);
      } else throw new Error(`this test does not know how to play "${l}" yet`);
    }

    const runAs = process.getuid?.() === 0 ? findExecutable('runuser') : undefined;
    for (const l of final.lines) {
      const [op, ...args] = l.split(/\s+/);
      if (op === 'COPY') {
        const flags = args.filter((a) => a.startsWith('--'));
        expect(flags).toEqual(['--from=build']);
        copy(appDir, args.slice(flags.length), (src) => join(buildDir, src.replace(/^\/app/, '')));
      } else if (op === 'RUN') {
        // The one RUN of the final stage: a folder of the service user's own.
        const m = /^mkdir (\/app\/\S+) && chown \S+ \1$/.exec(args.join(' '));
        if (m?.[1] === undefined) throw new Error(`this test does not know how to play "${l}"`);
        const dir = join(appDir, m[1].replace(/^\/app/, ''));
        mkdirSync(dir);
        if (runAs !== undefined) chownSync(dir, 65534, 65534);
      }
    }
    // The image holds production dependencies only.
    const pruned = spawnSync('npm', ['ls', '--omit=dev', '--all'], {
      cwd: appDir,
      encoding: 'utf8',
    });
    expect(pruned.status, pruned.stdout + pruned.stderr).toBe(0);
    expect(
      spawnSync('npm', ['ls', 'vitest'], { cwd: appDir, encoding: 'utf8' }).stdout,
    ).not.toMatch(/vitest@/);

    servers = await startTestServers({ partitions: 4, redis: true });
    const port = await freePort();
    const env = {
      PATH: process.env.PATH ?? '',
      HOME: tmpdir(),
      ...stageEnv(final),
      NATS_URL: servers.nats.url,
      REDIS_URL: servers.redis?.url ?? '',
      // Loopback here; the image listens on all interfaces.
      VIGIL_HTTP_HOST: '127.0.0.1',
      VIGIL_HTTP_PORT: String(port),
      VIGIL_PARTITIONS: '4',
      VIGIL_WORKERS: '1',
    };
    const asUser = (argv: string[]): [string, string[]] => {
      const [exe = '', ...rest] = argv;
      const bin = exe === 'node' ? process.execPath : exe;
      return runAs === undefined ? [bin, rest] : [runAs, ['-u', 'nobody', '--', bin, ...rest]];
    };
    const [exe, args] = asUser(execForm(final.lines.find((l) => l.startsWith('CMD '))));
    const child = spawn(exe, args, { cwd: appDir, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    try {
      const [hexe, hargs] = asUser(execForm(final.lines.find((l) => l.startsWith('HEALTHCHECK '))));
      const until = Date.now() + 90_000;
      let healthy = false;
      while (!healthy && child.exitCode === null && Date.now() < until) {
        healthy = spawnSync(hexe, hargs, { cwd: appDir, env, timeout: 10_000 }).status === 0;
        if (!healthy) await new Promise((r) => setTimeout(r, 500));
      }
      expect(healthy, `no healthy service:\n${out.slice(-3000)}`).toBe(true);
      expect(child.exitCode, out.slice(-3000)).toBeNull();
    } finally {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(timer);
    }
  });
});
