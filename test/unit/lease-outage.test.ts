import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { elapse, member, RENEW, resetWorld, sorted, TTL, world } from './lease-members.js';

beforeEach(() => {
  vi.useFakeTimers();
  resetWorld();
});

afterEach(() => {
  vi.useRealTimers();
});

describe('LeaseCoordinator through a lease-store outage and hand-overs', () => {
  const N = 16;
  const all = Array.from({ length: N }, (_, p) => p);
  const byNumber = (x: number[]): number[] => [...x].sort((m, n) => m - n);

  /** a and b sharing N partitions, balanced, then the store down for three TTLs. */
  async function throughOutage() {
    const a = member('a', 'i1', { partitions: N });
    const b = member('b', 'i1', { partitions: N });
    await a.coordinator.start();
    await b.coordinator.start();
    await elapse(10 * RENEW, a, b);
    const before = [sorted(a.coordinator.leases()), sorted(b.coordinator.leases())];
    expect(before.map((x) => x.length)).toEqual([N / 2, N / 2]);
    const downAt = Date.now();
    world.backend.refusing = true;
    await elapse(3 * TTL, a, b);
    return { a, b, downAt, before };
  }

  it('while the store is down no process is ready (it says since when, once); back, each takes its share once, the one back later too, and nothing moves twice', async () => {
    const { a, b, downAt, before } = await throughOutage();
    for (const x of [a, b]) {
      // Every lease given up before it could expire; not ready, with the reason.
      expect(x.coordinator.leases().size).toBe(0);
      const status = x.held.status();
      expect(status.ready).toBe(false);
      expect(status.reason).toMatch(/^lease store unreachable since \d{4}-/);
      expect(Date.parse(status.storeUnreachableSince ?? '')).toBeGreaterThanOrEqual(downAt);
      // Fifteen failed rounds, counted; said once.
      expect(x.coordinator.storeFailures().get('heartbeat')).toBeGreaterThanOrEqual(14);
      expect(x.coordinator.storeFailures().get('renew')).toBeGreaterThan(0);
      expect(x.logs.filter((l) => l.includes('lease store unreachable'))).toHaveLength(1);
      expect(x.logs.filter((l) => l.includes('rebalance failed'))).toEqual([]);
    }
    // The store is back, every registration and lease lapsed; a's client reconnects three
    // renewal intervals after b's (a held the lower-numbered partitions before).
    const mark = world.events.length;
    a.store.mode = 'down';
    world.backend.refusing = false;
    const upAt = Date.now();
    await elapse(3 * RENEW, a, b);
    // b took its share, not a's, and serves it.
    expect(b.coordinator.leases().size).toBe(N / 2);
    expect(b.coordinator.ready).toBe(true);
    expect(a.coordinator.ready).toBe(false);
    a.store.mode = 'up';
    const backAt = Date.now();
    await elapse(10 * RENEW, a, b);
    // Each took back the partitions it had.
    expect([sorted(a.coordinator.leases()), sorted(b.coordinator.leases())]).toEqual(before);
    expect(a.coordinator.ready && b.coordinator.ready).toBe(true);
    const after = world.events.slice(mark);
    // Each partition taken once after the outage, nothing given up again.
    expect(after.filter((e) => e.op !== 'start')).toEqual([]);
    expect(byNumber(after.map((e) => e.p))).toEqual(all);
    // Each within a renewal interval of its owner reaching the store again.
    for (const e of after)
      expect(e.at - (e.who === 'bi1' ? upAt : backAt)).toBeLessThanOrEqual(RENEW);
    for (const x of [a, b]) {
      expect(x.logs.filter((l) => l.includes('lease store reachable again'))).toHaveLength(1);
      expect(x.held.status().storeUnreachableSince).toBeUndefined();
    }
  });

  it('a member presumed alive after an outage that does not come back: its share is taken one TTL after the store came back', async () => {
    const { a, b } = await throughOutage();
    const mark = world.events.length;
    b.store.mode = 'down';
    world.backend.refusing = false;
    await elapse(TTL - 2 * RENEW, a, b);
    expect(a.coordinator.leases().size).toBe(N / 2);
    await elapse(3 * RENEW, a, b);
    expect(byNumber(sorted(a.coordinator.leases()))).toEqual(all);
    expect(world.events.slice(mark).filter((e) => e.op !== 'start')).toEqual([]);
  });

  it('a partition handed over is taken by its new owner at once, while another of the same step is still checkpointing', async () => {
    // a's final checkpoint of partition 3 takes 3 s, of partition 2 nothing.
    const a = member('a', 'i1', { stopMs: (p) => (p === 3 ? 3000 : 0) });
    const b = member('b');
    await a.coordinator.start();
    await b.coordinator.start();
    await elapse(20 * RENEW, a, b);
    expect(sorted(b.coordinator.leases())).toEqual([2, 3]);
    for (const p of [2, 3]) {
      const stopped = world.events.find((e) => e.who === 'ai1' && e.op === 'stopped' && e.p === p);
      const taken = world.events.find((e) => e.who === 'bi1' && e.op === 'start' && e.p === p);
      // b looks again every 50 ms while a's surplus is on its way to it.
      expect((taken?.at ?? Infinity) - (stopped?.at ?? 0)).toBeLessThanOrEqual(100);
    }
  });

  it('a process whose share is none (more processes than partitions) is ready holding nothing', async () => {
    const [a, b, c] = ['a', 'b', 'c'].map((id) => member(id, 'i1', { partitions: 2 }));
    for (const x of [a, b, c]) await x?.coordinator.start();
    await elapse(5 * RENEW, ...[a, b, c].flatMap((x) => (x ? [x] : [])));
    expect(c?.coordinator.leases().size).toBe(0);
    expect(c?.held.status()).toEqual({ ready: true, held: 0, share: 0 });
    expect(a?.coordinator.ready && b?.coordinator.ready).toBe(true);
  });
});
