import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findExecutable, freePort } from '../../scripts/local-servers.js';
import { mounts, service } from '../compose.js';

/** The compose file's nats command, run with the real nats-server (no Docker engine runs here). */
const tmp = mkdtempSync(join(tmpdir(), 'vigil-packaging-nats-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('docker-compose.yml with a real nats-server', () => {
  it('the nats command line works with the shipped config (run here with nats-server)', async () => {
    const exe = findExecutable('nats-server');
    expect(exe).toBeDefined();
    const hostPaths = new Map(mounts('nats').map(([s, t]) => [t, resolve(s)]));
    const port = await freePort();
    const monitor = await freePort();
    const command = service('nats').command ?? [];
    const [, ...args] = command.map((a, i) =>
      a === '0.0.0.0'
        ? '127.0.0.1'
        : command[i - 1] === '--http_port'
          ? String(monitor)
          : (hostPaths.get(a) ?? a),
    );
    const dir = mkdtempSync(join(tmp, 'nats-'));
    const child = spawn(exe ?? 'nats-server', [...args, '--port', String(port)], { cwd: dir });
    let out = '';
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    try {
      const until = Date.now() + 20_000;
      while (!/Server is ready/.test(out) && child.exitCode === null && Date.now() < until)
        await new Promise((r) => setTimeout(r, 50));
      expect(out).toMatch(/Server is ready/);
      expect(out).toMatch(/Starting JetStream/);
      expect(existsSync(join(dir, '.vigil/nats/jetstream'))).toBe(true);
      // What the compose healthcheck asks for, on the monitoring port the command opens.
      const health = (service('nats') as { healthcheck?: { test: string[] } }).healthcheck;
      const url = new URL(health?.test.at(-1) ?? '');
      expect(url.port).toBe(command[command.indexOf('--http_port') + 1]);
      url.port = String(monitor);
      expect((await fetch(url)).status).toBe(200);
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  });
});
