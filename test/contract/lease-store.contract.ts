import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CheckpointParts } from '../../rules/index.js';
import { CheckpointFencedError } from '../../service/checkpoint/checkpoint-store.js';
import { InstanceReplacedError, type LeaseStore } from '../../service/ownership/lease-store.js';
import type { StoreEnv, StoreEnvFactory } from './store-env.js';

/** A one-field checkpoint at `offset`. */
export const checkpointAt = (offset: number): CheckpointParts => ({
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

/**
 * The semantics every {@link LeaseStore} keeps, with the checkpoint store beside it (the fencing
 * token ties the two): run against each implementation by a test file that gives it the stores.
 */
export function leaseStoreContract(factory: StoreEnvFactory): void {
  let env: StoreEnv;
  beforeEach(async () => {
    env = await factory();
  });
  afterEach(async () => {
    await env.close();
  });

  /** A registered process. */
  async function join(instance: string, incarnation: string, ttlMs: number): Promise<LeaseStore> {
    const s = await env.leaseStore(instance, incarnation, ttlMs);
    await s.heartbeat(true);
    return s;
  }

  describe('LeaseStore contract', () => {
    it('acquire hands out a new fencing token; a held lease is refused to others; renew and release check the holder', async () => {
      const a = await join('a', 'i1', 5000);
      const b = await join('b', 'i1', 5000);
      expect(await a.acquire(0)).toBe(1);
      expect(await a.acquire(1)).toBe(1);
      expect(await b.acquire(0)).toBeUndefined();
      // Acquiring a lease one already holds keeps its token.
      expect(await a.acquire(0)).toBe(1);
      expect(await a.renew(0, 1)).toBe(true);
      expect(await a.renew(0, 2)).toBe(false);
      expect(await b.renew(0, 1)).toBe(false);
      expect(await b.release(0, 1)).toBe(false);
      expect(await a.release(0, 2)).toBe(false);
      expect((await a.holders(3)).map((h) => h?.instanceId)).toEqual(['a', 'a', undefined]);
      expect(await a.release(0, 1)).toBe(true);
      expect(await a.renew(0, 1)).toBe(false);
      // Tokens only grow: the next owner of partition 0 gets 2.
      expect(await b.acquire(0)).toBe(2);
      expect(await b.holders(2)).toEqual([
        { instanceId: 'b', incarnation: 'i1', token: 2 },
        { instanceId: 'a', incarnation: 'i1', token: 1 },
      ]);
      expect(await a.holders(0)).toEqual([]);
    });

    it('a lease not renewed expires after its TTL and another process takes it; the old holder cannot renew it', async () => {
      const a = await join('a', 'i1', 1000);
      const b = await join('b', 'i1', 1000);
      expect(await a.acquire(3)).toBe(1);
      // Renewed every 300 ms, it outlives its TTL several times over.
      for (let i = 0; i < 6; i++) {
        await env.elapse(300);
        expect(await a.renew(3, 1)).toBe(true);
        expect(await b.acquire(3)).toBeUndefined();
      }
      await env.elapse(1200);
      expect((await a.holders(4))[3]).toBeUndefined();
      expect(await b.acquire(3)).toBe(2);
      expect(await a.renew(3, 1)).toBe(false);
      expect(await a.release(3, 1)).toBe(false);
    });

    it('the checkpoint write of an owner whose lease was taken over is refused, before and after the new owner writes', async () => {
      const checkpoints = await env.checkpointStore();
      const a = await join('a', 'i1', 300);
      const b = await join('b', 'i1', 300);
      const ta = (await a.acquire(5)) ?? 0;
      expect(ta).toBe(1);
      await checkpoints.save(5, checkpointAt(10), ta);
      await env.elapse(450);
      const tb = (await b.acquire(5)) ?? 0;
      expect(tb).toBe(2);
      // The stored checkpoint still carries token 1, but token 2 has been handed out.
      await expect(checkpoints.save(5, checkpointAt(20), ta)).rejects.toBeInstanceOf(
        CheckpointFencedError,
      );
      expect((await checkpoints.load(5))?.offset).toBe(10);
      await checkpoints.save(5, checkpointAt(12), tb);
      await expect(checkpoints.save(5, checkpointAt(30), ta)).rejects.toBeInstanceOf(
        CheckpointFencedError,
      );
      expect((await checkpoints.load(5))?.offset).toBe(12);
    });

    it('reissue gives a held lease a new token and keeps its expiry; the old token can no longer renew or checkpoint', async () => {
      const checkpoints = await env.checkpointStore();
      const a = await join('a', 'i1', 1000);
      const b = await join('b', 'i1', 1000);
      const t1 = (await a.acquire(3)) ?? 0;
      await checkpoints.save(3, checkpointAt(10), t1);
      await env.elapse(600);
      const t2 = (await a.reissue(3, t1)) ?? 0;
      expect(t2).toBe(t1 + 1);
      expect((await a.holders(4))[3]).toEqual({ instanceId: 'a', incarnation: 'i1', token: t2 });
      // A write the holder of the old token left on its way is refused, as is its renewal.
      await expect(checkpoints.save(3, checkpointAt(20), t1)).rejects.toBeInstanceOf(
        CheckpointFencedError,
      );
      expect(await a.renew(3, t1)).toBe(false);
      await checkpoints.save(3, checkpointAt(20), t2);
      expect(await b.acquire(3)).toBeUndefined();
      // Not renewed since it was acquired, 1200 ms ago: the reissue did not extend it.
      await env.elapse(600);
      expect(await b.acquire(3)).toBe(t2 + 1);
      expect(await a.reissue(3, t2)).toBeUndefined();
    });

    it('only the holder of the current token reissues; a new token exceeds the stored checkpoint’s even if the counter was lost', async () => {
      const checkpoints = await env.checkpointStore();
      const a = await join('a', 'i1', 5000);
      const b = await join('b', 'i1', 5000);
      const t1 = (await a.acquire(3)) ?? 0;
      const t2 = (await a.reissue(3, t1)) ?? 0;
      expect(t2).toBe(t1 + 1);
      expect(await a.renew(3, t2)).toBe(true);
      await checkpoints.save(3, checkpointAt(20), t2);
      expect(await a.reissue(3, t1)).toBeUndefined();
      expect(await b.reissue(3, t2)).toBeUndefined();
      // A free lease cannot be reissued.
      expect(await a.reissue(9, 1)).toBeUndefined();
      await env.loseTokenCounter(3);
      const t3 = (await a.reissue(3, t2)) ?? 0;
      expect(t3).toBe(t2 + 1);
      await checkpoints.save(3, checkpointAt(21), t3);
      expect((await checkpoints.load(3))?.offset).toBe(21);
    });

    it('a new token exceeds the one stored with the checkpoint, even if the counter was lost', async () => {
      const checkpoints = await env.checkpointStore();
      // A checkpoint written under token 7, and no counter (Redis restored from an older snapshot).
      await checkpoints.save(1, checkpointAt(10), 7);
      const a = await join('a', 'i1', 5000);
      const token = (await a.acquire(1)) ?? 0;
      expect(token).toBe(8);
      await checkpoints.save(1, checkpointAt(11), token);
      expect((await checkpoints.load(1))?.offset).toBe(11);
      // The counter goes on from there.
      expect(await a.release(1, token)).toBe(true);
      expect(await a.acquire(1)).toBe(9);
    });

    it('a restarted process (same instance id) takes its leases back at once with new tokens; the old incarnation is refused', async () => {
      const old = await join('a', 'i1', 10_000);
      expect(await old.acquire(0)).toBe(1);
      const other = await join('b', 'i1', 10_000);
      expect(await other.acquire(0)).toBeUndefined();
      const restarted = await join('a', 'i2', 10_000);
      expect(await restarted.acquire(0)).toBe(2);
      expect(await old.renew(0, 1)).toBe(false);
      await expect(old.heartbeat()).rejects.toBeInstanceOf(InstanceReplacedError);
      await expect(old.acquire(1)).rejects.toBeInstanceOf(InstanceReplacedError);
      // The old incarnation leaving does not unregister the new one.
      await old.leave();
      expect(await other.heartbeat()).toEqual(['a', 'b']);
    });

    it('a process that has not registered under its incarnation cannot acquire', async () => {
      const a = await env.leaseStore('a', 'i1', 5000);
      await expect(a.acquire(0)).rejects.toBeInstanceOf(InstanceReplacedError);
      expect(await a.heartbeat(true)).toEqual(['a']);
      expect(await a.acquire(0)).toBe(1);
    });

    it('membership: live processes are listed, one that stops heartbeating drops out after the TTL, one that leaves at once', async () => {
      const a = await join('a', 'i1', 1000);
      const b = await join('b', 'i1', 1000);
      const c = await join('c', 'i1', 1000);
      expect(await a.heartbeat()).toEqual(['a', 'b', 'c']);
      await c.leave();
      expect(await a.heartbeat()).toEqual(['a', 'b']);
      for (let i = 0; i < 5; i++) {
        await env.elapse(300);
        await a.heartbeat();
      }
      expect(await a.heartbeat()).toEqual(['a']);
      // A process whose entry expired (it was slow, not dead) registers again with its next heartbeat.
      expect(await b.heartbeat()).toEqual(['a', 'b']);
    });

    it('the rebalance lock is held by one process at a time, until it is let go or expires', async () => {
      const a = await join('a', 'i1', 5000);
      const b = await join('b', 'i1', 5000);
      expect(await a.lock(5000)).toBe(true);
      expect(await b.lock(5000)).toBe(false);
      await b.unlock();
      expect(await b.lock(5000)).toBe(false);
      await a.unlock();
      expect(await b.lock(300)).toBe(true);
      expect(await a.lock(5000)).toBe(false);
      await env.elapse(450);
      expect(await a.lock(5000)).toBe(true);
      // A restart of the holder takes it over at once; the old incarnation cannot let it go.
      const restarted = await join('a', 'i2', 5000);
      expect(await restarted.lock(5000)).toBe(true);
      await a.unlock();
      expect(await b.lock(5000)).toBe(false);
      await restarted.unlock();
      expect(await b.lock(5000)).toBe(true);
    });

    it('a closed store refuses every operation', async () => {
      const a = await join('a', 'i1', 5000);
      await a.close();
      await expect(a.acquire(0)).rejects.toThrow();
      await expect(a.heartbeat()).rejects.toThrow();
    });
  });
}
