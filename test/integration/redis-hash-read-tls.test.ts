import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../scripts/local-servers.js';

// readHash over rediss:// against a real redis-server with TLS on, its certificate made here by
// openssl. The process that reads trusts it the way a deployment would, through
// NODE_EXTRA_CA_CERTS, which Node reads at start-up: so the read runs in a child process.

let dir: string;
let server: ChildProcess | undefined;
let url: string;
let ca: Buffer;
const key = `t${Date.now()}:state`;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vigil-redis-tls-'));
  const made = spawnSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '1',
      '-keyout',
      join(dir, 'key.pem'),
      '-out',
      join(dir, 'cert.pem'),
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ],
    { encoding: 'utf8' },
  );
  if (made.status !== 0)
    throw new Error(
      `openssl could not make a test certificate (install openssl): ${made.stderr ?? made.error?.message}`,
    );
  ca = readFileSync(join(dir, 'cert.pem'));
  const port = await freePort();
  server = spawn(
    'redis-server',
    [
      '--port',
      '0',
      '--bind',
      '127.0.0.1',
      '--tls-port',
      String(port),
      '--tls-cert-file',
      join(dir, 'cert.pem'),
      '--tls-key-file',
      join(dir, 'key.pem'),
      '--tls-ca-cert-file',
      join(dir, 'cert.pem'),
      '--tls-auth-clients',
      'no',
      '--dir',
      dir,
      '--save',
      '',
      '--appendonly',
      'no',
    ],
    { stdio: 'ignore' },
  );
  url = `rediss://127.0.0.1:${port}`;
  const until = Date.now() + 10_000;
  for (;;) {
    const c = new Redis(url, {
      tls: { ca },
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    try {
      await c.connect();
      await c.hset(key, { ключ: 'значение', f: 'v'.repeat(1000) });
      c.disconnect();
      break;
    } catch (e) {
      c.disconnect();
      if (Date.now() > until) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
});

afterAll(() => {
  server?.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** readHash in a child process; resolves its printed result or error. */
function readInChild(env: Record<string, string>): Promise<{ ok: boolean; value: unknown }> {
  const script = `
    const { readHash } = await import('./service/checkpoint/redis-hash-read.ts');
    try { console.log(JSON.stringify({ ok: true, value: await readHash(${JSON.stringify(url)}, ${JSON.stringify(key)}) })); }
    catch (e) { console.log(JSON.stringify({ ok: false, value: { message: e.message, retryable: e.retryable } })); }`;
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script],
      {
        env: { ...process.env, ...env },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', () => {
      try {
        resolve(JSON.parse(out.trim().split('\n').pop() ?? '') as { ok: boolean; value: unknown });
      } catch {
        reject(new Error(`the child printed no result: ${out}`));
      }
    });
  });
}

describe('readHash over TLS (rediss://)', () => {
  it('reads the hash from a server whose certificate the process trusts', async () => {
    const got = await readInChild({ NODE_EXTRA_CA_CERTS: join(dir, 'cert.pem') });
    expect(got.ok).toBe(true);
    const flat = got.value as string[];
    const fields = Object.fromEntries(
      Array.from({ length: flat.length / 2 }, (_, i) => [flat[2 * i], flat[2 * i + 1]]),
    );
    expect(fields).toEqual({ ключ: 'значение', f: 'v'.repeat(1000) });
  });

  it('refuses a certificate it does not trust, with an error retrying cannot mend', async () => {
    const got = await readInChild({ NODE_EXTRA_CA_CERTS: '' });
    expect(got.ok).toBe(false);
    expect(got.value).toMatchObject({ retryable: false });
    expect((got.value as { message: string }).message).toMatch(/certificate/i);
  });
});
