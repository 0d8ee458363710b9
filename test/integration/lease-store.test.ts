import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { leaseKeys, RedisLeaseStore } from '../../service/ownership/lease-store.js';
import { freePort, startRedis, type ServerHandle } from '../../scripts/local-servers.js';
import { leaseStoreContract } from '../contract/lease-store.contract.js';
import { redisStoreEnv } from '../contract/store-env.js';

let dir: string;
let redis: ServerHandle;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vigil-lease-'));
  redis = await startRedis({ dataDir: dir });
});

afterAll(async () => {
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('RedisLeaseStore (real redis-server)', () => {
  leaseStoreContract(redisStoreEnv(() => redis.url));

  it('reissue keeps the lease key’s expiry in Redis and changes only the token of its value', async () => {
    const pre = `r${Date.now().toString(36)}:`;
    const a = new RedisLeaseStore(redis.url, 'a', 'i1', 5000, pre);
    const raw = new Redis(redis.url);
    try {
      await a.connected();
      await a.heartbeat(true);
      const t1 = (await a.acquire(3)) ?? 0;
      expect(await raw.get(leaseKeys.lease(3, pre))).toBe(`a i1 ${t1}`);
      await new Promise((r) => setTimeout(r, 100));
      const ttlBefore = await raw.pttl(leaseKeys.lease(3, pre));
      const t2 = await a.reissue(3, t1);
      const ttlAfter = await raw.pttl(leaseKeys.lease(3, pre));
      expect(ttlAfter).toBeGreaterThan(0);
      expect(ttlAfter).toBeLessThanOrEqual(ttlBefore);
      expect(await raw.get(leaseKeys.lease(3, pre))).toBe(`a i1 ${t2}`);
      expect(Number(await raw.get(leaseKeys.token(3, pre)))).toBe(t2);
    } finally {
      await raw.quit();
      await a.close();
    }
  });

  it('has no offline queue: while Redis is away a lease operation fails at once rather than late', async () => {
    const port = await freePort();
    const s = new RedisLeaseStore(`redis://127.0.0.1:${port}`, 'a', 'i1', 5000, 'x:');
    try {
      await expect(s.connected(300)).rejects.toThrow(/not reachable/);
      const started = Date.now();
      await expect(s.renew(0, 1)).rejects.toThrow();
      await expect(s.heartbeat()).rejects.toThrow();
      expect(Date.now() - started).toBeLessThan(1000);
    } finally {
      await s.close();
    }
  });
});
