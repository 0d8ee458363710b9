import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CheckpointParts } from '../../rules/index.js';
import { fairShares, planMoves } from '../../service/ownership/assignment.js';
import {
  CheckpointFencedError,
  RedisCheckpointStore,
} from '../../service/checkpoint/checkpoint-store.js';
import { InstanceReplacedError, RedisLeaseStore } from '../../service/ownership/lease-store.js';
import { startRedis, type ServerHandle } from '../../scripts/local-servers.js';

let dir: string;
let redis: ServerHandle;
const stores: { close(): Promise<void> }[] = [];
let run = 0;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vigil-lease-'));
  redis = await startRedis({ dataDir: dir });
});

afterAll(async () => {
  for (const s of stores) await s.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A fresh key prefix per test, so tests never see each other's leases. */
function prefix(): string {
  return `t${Date.now().toString(36)}${run++}:`;
}

async function leaseStore(
  pre: string,
  instance: string,
  incarnation: string,
  ttlMs: number,
): Promise<RedisLeaseStore> {
  const s = new RedisLeaseStore(redis.url, instance, incarnation, ttlMs, pre);
  stores.push(s);
  await s.connected();
  await s.heartbeat(true);
  return s;
}

const parts = (offset: number): CheckpointParts => ({
  offset,
  controlSeq: 0,
  meta: `{"offset":${offset}}`,
  upserts: [['f', String(offset)]],
  deletes: [],
  buffered: [],
  released: [],
  bufferedAfter: 0,
  releasedChunks: new Map(),
  lineages: [],
  lineagesRemoved: [],
  changed: ['f'],
  full: true,
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('partition leases (real redis-server)', () => {
  it('acquire hands out a new fencing token; a held lease is refused to others; renew and release check the holder', async () => {
    const pre = prefix();
    const a = await leaseStore(pre, 'a', 'i1', 5000);
    const b = await leaseStore(pre, 'b', 'i1', 5000);
    expect(await a.acquire(0)).toBe(1);
    expect(await a.acquire(1)).toBe(1);
    expect(await b.acquire(0)).toBeUndefined();
    // Acquiring a lease one already holds keeps its token.
    expect(await a.acquire(0)).toBe(1);
    expect(await a.renew(0, 1)).toBe(true);
    expect(await b.renew(0, 1)).toBe(false);
    expect(await b.release(0, 1)).toBe(false);
    expect((await a.holders(2)).map((h) => h?.instanceId)).toEqual(['a', 'a']);
    expect(await a.release(0, 1)).toBe(true);
    expect(await a.renew(0, 1)).toBe(false);
    // Tokens only grow: the next owner of partition 0 gets 2.
    expect(await b.acquire(0)).toBe(2);
    expect((await a.holders(2)).map((h) => [h?.instanceId, h?.token])).toEqual([
      ['b', 2],
      ['a', 1],
    ]);
  });

  it('a lease not renewed expires after its TTL and another process takes it; the old holder cannot renew it', async () => {
    const pre = prefix();
    const a = await leaseStore(pre, 'a', 'i1', 1000);
    const b = await leaseStore(pre, 'b', 'i1', 1000);
    const token = await a.acquire(3);
    expect(token).toBe(1);
    // Renewed every 300 ms, it outlives its TTL several times over.
    for (let i = 0; i < 6; i++) {
      await sleep(300);
      expect(await a.renew(3, 1)).toBe(true);
      expect(await b.acquire(3)).toBeUndefined();
    }
    await sleep(1200);
    expect(await b.acquire(3)).toBe(2);
    expect(await a.renew(3, 1)).toBe(false);
  });

  it('the checkpoint write of an owner whose lease was taken over is refused by Redis, before and after the new owner writes', async () => {
    const pre = prefix();
    const checkpoints = new RedisCheckpointStore(redis.url, pre);
    stores.push(checkpoints);
    const a = await leaseStore(pre, 'a', 'i1', 300);
    const b = await leaseStore(pre, 'b', 'i1', 300);
    const ta = await a.acquire(5);
    expect(ta).toBe(1);
    await checkpoints.save(5, parts(10), ta ?? 0);
    await sleep(450);
    const tb = await b.acquire(5);
    expect(tb).toBe(2);
    // The stored checkpoint still carries token 1, but token 2 has been handed out.
    await expect(checkpoints.save(5, parts(20), ta ?? 0)).rejects.toBeInstanceOf(
      CheckpointFencedError,
    );
    expect((await checkpoints.load(5))?.offset).toBe(10);
    await checkpoints.save(5, parts(12), tb ?? 0);
    await expect(checkpoints.save(5, parts(30), ta ?? 0)).rejects.toBeInstanceOf(
      CheckpointFencedError,
    );
    expect((await checkpoints.load(5))?.offset).toBe(12);
    expect(await checkpoints.loadControlSeqs(6)).toEqual([0, 0, 0, 0, 0, 0]);
  });

  it('reissue gives a held lease a new token, expiry kept; the old token can no longer renew or checkpoint', async () => {
    const pre = prefix();
    const checkpoints = new RedisCheckpointStore(redis.url, pre);
    stores.push(checkpoints);
    const a = await leaseStore(pre, 'a', 'i1', 5000);
    const t1 = (await a.acquire(3)) ?? 0;
    await checkpoints.save(3, parts(10), t1);
    const raw = new Redis(redis.url);
    const ttlBefore = await raw.pttl(`${pre}lease:3`);
    const t2 = await a.reissue(3, t1);
    expect(t2).toBe(t1 + 1);
    const ttlAfter = await raw.pttl(`${pre}lease:3`);
    expect(ttlAfter).toBeGreaterThan(0);
    expect(ttlAfter).toBeLessThanOrEqual(ttlBefore);
    await raw.quit();
    expect((await a.holders(4))[3]).toEqual({ instanceId: 'a', incarnation: 'i1', token: t2 });
    // A write the holder of the old token left on its way is refused, as is its renewal.
    await expect(checkpoints.save(3, parts(20), t1)).rejects.toBeInstanceOf(CheckpointFencedError);
    expect(await a.renew(3, t1)).toBe(false);
    expect(await a.renew(3, t2 ?? 0)).toBe(true);
    await checkpoints.save(3, parts(20), t2 ?? 0);
    // Only the holder of the current token can reissue; a free lease cannot be reissued.
    expect(await a.reissue(3, t1)).toBeUndefined();
    const b = await leaseStore(pre, 'b', 'i1', 5000);
    expect(await b.reissue(3, t2 ?? 0)).toBeUndefined();
    expect(await a.reissue(9, 1)).toBeUndefined();
    // The new token is above the stored checkpoint's, should the counter have been lost.
    const raw2 = new Redis(redis.url);
    await raw2.del(`${pre}lease:3:token`);
    await raw2.quit();
    expect(await a.reissue(3, t2 ?? 0)).toBe((t2 ?? 0) + 1);
  });

  it('a new token exceeds the one stored with the checkpoint, even if the counter was lost', async () => {
    const pre = prefix();
    const checkpoints = new RedisCheckpointStore(redis.url, pre);
    stores.push(checkpoints);
    // A checkpoint written under token 7, and no counter (Redis restored from an older snapshot).
    await checkpoints.save(1, parts(10), 7);
    const a = await leaseStore(pre, 'a', 'i1', 5000);
    const token = await a.acquire(1);
    expect(token).toBe(8);
    await checkpoints.save(1, parts(11), token ?? 0);
    expect((await checkpoints.load(1))?.offset).toBe(11);
  });

  it('a restarted process (same instance id) takes its leases back at once with new tokens; the old incarnation is refused', async () => {
    const pre = prefix();
    const old = await leaseStore(pre, 'a', 'i1', 10_000);
    expect(await old.acquire(0)).toBe(1);
    const other = await leaseStore(pre, 'b', 'i1', 10_000);
    expect(await other.acquire(0)).toBeUndefined();
    const restarted = await leaseStore(pre, 'a', 'i2', 10_000);
    expect(await restarted.acquire(0)).toBe(2);
    expect(await old.renew(0, 1)).toBe(false);
    await expect(old.heartbeat()).rejects.toBeInstanceOf(InstanceReplacedError);
    await expect(old.acquire(1)).rejects.toBeInstanceOf(InstanceReplacedError);
    expect(await restarted.heartbeat()).toEqual(['a', 'b']);
  });

  it('membership: live processes are listed, one that stops heartbeating drops out after the TTL, one that leaves at once', async () => {
    const pre = prefix();
    const a = await leaseStore(pre, 'a', 'i1', 1000);
    const b = await leaseStore(pre, 'b', 'i1', 1000);
    const c = await leaseStore(pre, 'c', 'i1', 1000);
    expect(await a.heartbeat()).toEqual(['a', 'b', 'c']);
    await c.leave();
    expect(await a.heartbeat()).toEqual(['a', 'b']);
    for (let i = 0; i < 5; i++) {
      await sleep(300);
      await a.heartbeat();
    }
    expect(await a.heartbeat()).toEqual(['a']);
    // A process whose entry expired (it was slow, not dead) registers again with its next heartbeat.
    expect(await b.heartbeat()).toEqual(['a', 'b']);
  });

  it('the rebalance lock is held by one process at a time', async () => {
    const pre = prefix();
    const a = await leaseStore(pre, 'a', 'i1', 5000);
    const b = await leaseStore(pre, 'b', 'i1', 5000);
    expect(await a.lock(5000)).toBe(true);
    expect(await b.lock(5000)).toBe(false);
    await b.unlock();
    expect(await b.lock(5000)).toBe(false);
    await a.unlock();
    expect(await b.lock(5000)).toBe(true);
  });
});

describe('balanced assignment (pure)', () => {
  const owners = (counts: Record<string, number>, free = 0): (string | undefined)[] => [
    ...Object.entries(counts).flatMap(([m, n]) => Array<string>(n).fill(m)),
    ...Array<undefined>(free).fill(undefined),
  ];

  it('shares are ⌊P/k⌋ or ⌈P/k⌉, the larger ones to the largest holders', () => {
    expect(fairShares(['a', 'b', 'c'], new Map(), 16)).toEqual(
      new Map([
        ['a', 6],
        ['b', 5],
        ['c', 5],
      ]),
    );
    expect(
      fairShares(
        ['a', 'b', 'c'],
        new Map([
          ['c', 8],
          ['b', 8],
        ]),
        16,
      ).get('b'),
    ).toBe(6);
  });

  it('a member over its share releases only its surplus, one under it takes only free partitions', () => {
    // a holds everything, b joins: a gives 8 up, b takes none until they are free.
    expect(planMoves('a', ['a', 'b'], owners({ a: 16 })).release).toHaveLength(8);
    expect(planMoves('b', ['a', 'b'], owners({ a: 16 }))).toEqual({ release: [], acquire: [] });
    expect(planMoves('b', ['a', 'b'], owners({ a: 8 }, 8)).acquire).toHaveLength(8);
    // A third joins: a and b give up 3 and 2 (or 2 and 3), never take from each other.
    const step = planMoves('a', ['a', 'b', 'c'], owners({ a: 8, b: 8 }));
    expect(step.release).toHaveLength(2);
    expect(step.acquire).toEqual([]);
    // Leases of a dead member (not live) are neither free nor counted.
    expect(planMoves('b', ['b'], owners({ dead: 4, b: 2 }, 2))).toEqual({
      release: [],
      acquire: [6, 7],
    });
  });
});
