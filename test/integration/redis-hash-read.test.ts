import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServiceError } from '../../service/index.js';
import { startRedis, type ServerHandle } from '../../scripts/local-servers.js';
import { readHash } from '../../service/checkpoint/redis-hash-read.js';

let dir: string;
let redis: ServerHandle;
let admin: Redis;
const key = `t${Date.now()}:state`;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vigil-hash-read-'));
  redis = await startRedis({ dataDir: dir });
  admin = new Redis(redis.url);
});

afterAll(async () => {
  admin?.disconnect();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('readHash: a checkpoint hash read on a connection of its own', () => {
  it('reads what ioredis reads: many fields, UTF-8, empty and large values across chunks', async () => {
    const fields: Record<string, string> = {
      'ключ-é': 'значение "ü" 🎉',
      empty: '',
      big: 'x'.repeat(300_000),
    };
    for (let i = 0; i < 20_000; i++) fields[`k${i}`] = JSON.stringify([i, [[3, 1, i % 7]]]);
    await admin.hset(key, fields);
    const viaIoredis = (await admin.call('HGETALL', key)) as string[];
    const got = await readHash(redis.url, key);
    expect(got.length).toBe(2 * Object.keys(fields).length);
    expect(got).toEqual(viaIoredis);
  });

  it('reads a missing key as no fields', async () => {
    expect(await readHash(redis.url, `${key}:none`)).toEqual([]);
  });

  it('reads the database the URL names', async () => {
    const db3 = new Redis(`${redis.url}/3`);
    try {
      await db3.hset(`${key}:db`, { a: '1' });
      expect(await readHash(`${redis.url}/3`, `${key}:db`)).toEqual(['a', '1']);
      expect(await readHash(redis.url, `${key}:db`)).toEqual([]);
    } finally {
      db3.disconnect();
    }
  });

  it('refuses a key of another type with an error retrying cannot mend', async () => {
    await admin.set(`${key}:string`, 'x');
    const err = await readHash(redis.url, `${key}:string`).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServiceError);
    expect((err as ServiceError).retryable).toBe(false);
    expect((err as Error).message).toMatch(/reading hash .*:string .*WRONGTYPE/);
  });

  it('authenticates with the password in the URL; a wrong or missing one is not retried', async () => {
    await admin.hset(`${key}:auth`, { f: 'v' });
    await admin.config('SET', 'requirepass', 's3cr#t');
    try {
      const u = new URL(redis.url);
      const withPassword = `redis://:${encodeURIComponent('s3cr#t')}@${u.host}`;
      expect(await readHash(withPassword, `${key}:auth`)).toEqual(['f', 'v']);
      const aclUser = `redis://default:${encodeURIComponent('s3cr#t')}@${u.host}`;
      expect(await readHash(aclUser, `${key}:auth`)).toEqual(['f', 'v']);
      for (const url of [redis.url, `redis://:wrong@${u.host}`]) {
        const err = await readHash(url, `${key}:auth`).catch((e: unknown) => e);
        expect((err as ServiceError).retryable).toBe(false);
        expect((err as Error).message).toMatch(/NOAUTH|WRONGPASS/);
      }
    } finally {
      const authed = new Redis(redis.url, { password: 's3cr#t' });
      await authed.config('SET', 'requirepass', '');
      authed.disconnect();
    }
  });

  it('reports a server that is away as worth retrying', async () => {
    // A port nothing listens on: take one and close it.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const refused = await readHash(`redis://127.0.0.1:${port}`, key).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ServiceError);
    expect((refused as ServiceError).retryable).toBe(true);
  });
});
