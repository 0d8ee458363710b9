import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CheckpointFencedError } from '../../service/checkpoint/checkpoint-store.js';
import { MemoryCheckpointStore } from '../../service/checkpoint/memory-checkpoint-store.js';
import { MemoryLeaseStore } from '../../service/ownership/memory-lease-store.js';
import { checkpointAt } from '../contract/lease-store.contract.js';
import {
  elapse,
  member,
  P,
  RENEW,
  resetWorld,
  sorted,
  TTL,
  world,
  type HostEvent,
} from './lease-members.js';

beforeEach(() => {
  vi.useFakeTimers();
  resetWorld();
});

afterEach(() => {
  vi.useRealTimers();
});

describe('LeaseCoordinator', () => {
  it('a lone process registers, takes every partition under a fencing token and is ready after its first round', async () => {
    const a = member('a');
    expect(a.coordinator.ready).toBe(false);
    await a.coordinator.start();
    expect(a.coordinator.ready).toBe(true);
    expect(a.held.ready).toBe(true);
    expect(a.coordinator.leases()).toEqual(new Map([0, 1, 2, 3].map((p) => [p, 1])));
    expect(a.running).toEqual(a.coordinator.leases());
    expect(world.backend.members.has('a')).toBe(true);
    expect([...world.backend.leases.values()].map((l) => l.holder.instanceId)).toEqual(
      Array(P).fill('a'),
    );
    // Renewals keep the leases for many TTLs.
    await elapse(5 * TTL, a);
    expect(sorted(a.coordinator.leases())).toEqual([0, 1, 2, 3]);
    expect(a.stops('lost')).toEqual([]);
  });

  it('a process that joins gets its share: the other gives up its surplus after a final checkpoint, and only that moves', async () => {
    const a = member('a');
    const b = member('b');
    await a.coordinator.start();
    await b.coordinator.start();
    // Nothing was free: b holds no partition yet, and judges nothing: not ready, and it says why.
    expect(b.running.size).toBe(0);
    expect(b.held.status()).toEqual({
      ready: false,
      reason: expect.stringContaining('holds no partition; its share is 2') as string,
      held: 0,
      share: 2,
    });
    await elapse(5 * RENEW, a, b);
    expect(b.coordinator.ready).toBe(true);
    expect(sorted(a.coordinator.leases())).toEqual([0, 1]);
    expect(sorted(b.coordinator.leases())).toEqual([2, 3]);
    // The highest-numbered ones were released (stopped with a checkpoint), never lost.
    expect(a.stops('released').sort()).toEqual([2, 3]);
    expect(a.stops('lost')).toEqual([]);
    // Their new owner runs them under new tokens.
    expect(b.coordinator.leases()).toEqual(
      new Map([
        [2, 2],
        [3, 2],
      ]),
    );
    // Settled: nothing moves any more.
    const before = world.events.length;
    await elapse(10 * RENEW, a, b);
    expect(world.events.length).toBe(before);
  });

  it('a process that stops cleanly keeps renewing while its partitions checkpoint, then releases them and leaves; the others take them at once', async () => {
    const a = member('a');
    const b = member('b');
    await a.coordinator.start();
    await b.coordinator.start();
    await elapse(5 * RENEW, a, b);
    await b.coordinator.stop();
    // Stopping: no rebalance any more, but the leases are renewed well past their TTL.
    await elapse(3 * TTL, a, b);
    expect(sorted(b.coordinator.leases())).toEqual([2, 3]);
    expect(sorted(a.coordinator.leases())).toEqual([0, 1]);
    await b.coordinator.release();
    expect(b.coordinator.leases().size).toBe(0);
    expect(world.backend.members.has('b')).toBe(false);
    expect(world.backend.lease(2)).toBeUndefined();
    // Its store is closed.
    await expect(b.store.heartbeat()).rejects.toThrow();
    await elapse(2 * RENEW, a);
    expect(sorted(a.coordinator.leases())).toEqual([0, 1, 2, 3]);
    expect(a.coordinator.leases().get(2)).toBe(3);
  });

  it('a process cut off from the store stops its partitions before its leases can expire; the others take them only after they expired', async () => {
    const a = member('a');
    const b = member('b');
    await a.coordinator.start();
    await b.coordinator.start();
    await elapse(5 * RENEW, a, b);
    const cutAt = Date.now();
    const mark = world.events.length;
    b.store.mode = 'down';
    await elapse(3 * TTL, a, b);
    expect(b.coordinator.leases().size).toBe(0);
    expect(b.stops('lost').sort()).toEqual([2, 3]);
    expect(b.logs.some((l) => l.includes('lease lost (not renewed in time)'))).toBe(true);
    expect(sorted(a.coordinator.leases())).toEqual([0, 1, 2, 3]);
    // b stopped each partition at least one renewal interval before a started it (a takes it
    // once b's lease expired; b gives it up one interval before that).
    const after = world.events.slice(mark);
    for (const p of [2, 3]) {
      const lost = after.find((e) => e.who === 'bi1' && e.op === 'stop' && e.p === p);
      const taken = after.find((e) => e.who === 'ai1' && e.op === 'start' && e.p === p);
      expect(lost?.at).toBeLessThan(cutAt + TTL);
      expect((taken?.at ?? 0) - (lost?.at ?? Infinity)).toBeGreaterThanOrEqual(RENEW);
      expect(after.indexOf(taken as HostEvent)).toBeGreaterThan(after.indexOf(lost as HostEvent));
    }
    expect(a.coordinator.leases().get(2)).toBe(3);
  });

  it('a stalled store (calls that never answer) loses every lease one renewal interval before it may expire', async () => {
    const a = member('a');
    await a.coordinator.start();
    await elapse(RENEW, a);
    a.store.mode = 'stalled';
    // Renewed last at 200 ms at the latest: lost once TTL − renewMs has passed since.
    await elapse(TTL - 2 * RENEW, a);
    expect(a.coordinator.leases().size).toBe(P);
    await elapse(2 * RENEW, a);
    expect(a.coordinator.leases().size).toBe(0);
    expect(a.stops('lost').sort()).toEqual([0, 1, 2, 3]);
  });

  it('a lease the store gives to another owner is lost at the next renewal, and taken back under a new token once free', async () => {
    const a = member('a');
    await a.coordinator.start();
    // Partition 1's lease is gone from the store (expired while this process stalled) and
    // another process took it.
    world.backend.leases.delete(1);
    const x = new MemoryLeaseStore(world.backend, 'x', 'i1', TTL);
    await x.heartbeat(true);
    expect(await x.acquire(1)).toBe(2);
    // Not a member (so shares stay as they are), yet its lease is not free.
    await x.leave();
    await elapse(RENEW, a);
    expect(sorted(a.coordinator.leases())).toEqual([0, 2, 3]);
    expect(a.stops('lost')).toEqual([1]);
    expect(a.running.has(1)).toBe(false);
    expect(
      a.logs.some((l) => l.includes('partition 1: lease lost (Redis holds another owner or none)')),
    ).toBe(true);
    // a waits for x's lease to expire.
    await elapse(TTL - 2 * RENEW, a);
    expect(a.coordinator.leases().has(1)).toBe(false);
    await elapse(3 * RENEW, a);
    expect(a.coordinator.leases().get(1)).toBe(3);
    expect(a.running.get(1)).toBe(3);
  });

  it('a restarted process (same instance id) takes its leases back at once; the old incarnation gives up every partition and is not ready', async () => {
    const old = member('a', 'i1');
    await old.coordinator.start();
    const restarted = member('a', 'i2');
    await restarted.coordinator.start();
    expect(restarted.coordinator.leases()).toEqual(new Map([0, 1, 2, 3].map((p) => [p, 2])));
    await vi.advanceTimersByTimeAsync(RENEW);
    expect(old.coordinator.ready).toBe(false);
    expect(old.coordinator.leases().size).toBe(0);
    expect(old.stops('lost').sort()).toEqual([0, 1, 2, 3]);
    expect(old.logs.some((l) => l.startsWith('error') && l.includes('taken over'))).toBe(true);
    // It stays out: no partition is taken again by the old incarnation.
    await elapse(5 * RENEW, old, restarted);
    expect(old.running.size).toBe(0);
    expect(restarted.coordinator.ready).toBe(true);
  });

  it('a partition fenced out of its checkpoint is forgotten without another stop; the lease renewals go on for the rest', async () => {
    const a = member('a');
    const checkpoints = new MemoryCheckpointStore(world.backend);
    await a.coordinator.start();
    const token = a.coordinator.leases().get(2) ?? 0;
    await checkpoints.save(2, checkpointAt(5), token);
    // A newer owner of partition 2 (its lease expired while this process was stalled).
    world.backend.leases.delete(2);
    const x = new MemoryLeaseStore(world.backend, 'x', 'i1', 10 * TTL);
    await x.heartbeat(true);
    await x.acquire(2);
    await x.leave();
    await expect(checkpoints.save(2, checkpointAt(6), token)).rejects.toBeInstanceOf(
      CheckpointFencedError,
    );
    // The worker dropped the partition by itself and the pool reports it.
    a.held.fenced(2);
    expect(a.logs.some((l) => l.includes('partition 2: checkpoint fenced'))).toBe(true);
    expect(sorted(a.coordinator.leases())).toEqual([0, 1, 3]);
    await elapse(3 * RENEW, a);
    expect(a.stops('lost')).toEqual([]);
    expect(sorted(a.coordinator.leases())).toEqual([0, 1, 3]);
  });

  it('reissue hands a held lease a new token, renewed from then on; the old token fences and reissues nothing', async () => {
    const a = member('a');
    const checkpoints = new MemoryCheckpointStore(world.backend);
    await a.coordinator.start();
    const t1 = a.coordinator.leases().get(0) ?? 0;
    const t2 = await a.held.reissue(0, t1);
    expect(t2).toBe(t1 + 1);
    expect(a.coordinator.leases().get(0)).toBe(t2);
    expect(await a.held.reissue(0, t1)).toBeUndefined();
    expect(await a.held.reissue(7, 1)).toBeUndefined();
    await expect(checkpoints.save(0, checkpointAt(1), t1)).rejects.toBeInstanceOf(
      CheckpointFencedError,
    );
    await checkpoints.save(0, checkpointAt(1), t2 ?? 0);
    // Renewed under the new token: not lost over many TTLs.
    await elapse(3 * TTL, a);
    expect(a.coordinator.leases().get(0)).toBe(t2);
    expect(a.stops('lost')).toEqual([]);
  });

  it('a reissue the store cannot answer keeps the old token', async () => {
    const a = member('a');
    await a.coordinator.start();
    a.store.mode = 'down';
    await expect(a.held.reissue(0, 1)).rejects.toThrow();
    expect(a.coordinator.leases().get(0)).toBe(1);
  });

  it('registers only once the store can be reached, retrying, and is not ready meanwhile', async () => {
    const a = member('a');
    a.store.mode = 'down';
    let started = false;
    void a.coordinator.start().then(() => (started = true));
    await vi.advanceTimersByTimeAsync(5 * RENEW);
    expect(started).toBe(false);
    expect(a.coordinator.ready).toBe(false);
    expect(a.logs.some((l) => l.includes('cannot register in Redis yet'))).toBe(true);
    a.store.mode = 'up';
    await vi.advanceTimersByTimeAsync(RENEW);
    expect(started).toBe(true);
    expect(a.coordinator.ready).toBe(true);
    expect(a.running.size).toBe(P);
  });

  it('finding the rebalance lock taken, a process short of its share tries again soon, not a renewal interval later', async () => {
    // Another process (not a member) rebalances for 250 ms.
    const other = new MemoryLeaseStore(world.backend, 'z', 'i1', TTL);
    expect(await other.lock(250)).toBe(true);
    const a = member('a');
    await a.coordinator.start();
    expect(a.running.size).toBe(0);
    expect(a.held.status().reason).toBe('holds no partition yet (another process is rebalancing)');
    // a's next renewal round is at 400 ms; it looks every 50 ms meanwhile.
    await vi.advanceTimersByTimeAsync(320);
    expect(a.running.size).toBe(P);
  });

  it('waits for the rebalance lock another process holds', async () => {
    const other = new MemoryLeaseStore(world.backend, 'z', 'i1', TTL);
    await other.heartbeat(true);
    expect(await other.lock(3 * RENEW)).toBe(true);
    const a = member('a');
    await a.coordinator.start();
    expect(a.running.size).toBe(0);
    // z goes silent: once its lock and registration expire, a takes every partition.
    await elapse(TTL + 2 * RENEW, a);
    expect(a.running.size).toBe(P);
  });
});
