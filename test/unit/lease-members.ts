import { expect, vi } from 'vitest';
import { HeldLeases } from '../../service/ownership/held-leases.js';
import {
  LeaseCoordinator,
  type PartitionHost,
  type StopReason,
} from '../../service/ownership/lease-coordinator.js';
import type { LeaseHolder, LeaseStore } from '../../service/ownership/lease-store.js';
import { MemoryStoreBackend } from '../../service/ownership/memory-backend.js';
import { MemoryLeaseStore } from '../../service/ownership/memory-lease-store.js';

/*
 * Processes sharing partitions through leases on one memory backend, for the lease coordinator's
 * unit tests (fake timers): each with a lease store whose link can fail, its coordinator, and a
 * host that records what it ran.
 */

export const P = 4;
export const TTL = 1000;
export const RENEW = 200;

/** What happened on the hosts of every process, in order (`stopped`: a stop has ended). */
export type HostEvent = { readonly who: string; readonly p: number; readonly at: number } & (
  | { readonly op: 'start'; readonly token: number }
  | { readonly op: 'stop' | 'stopped'; readonly reason: StopReason }
);

/** A lease store whose link to the store can go down (every call fails) or stall (every call hangs). */
export class FaultyLeaseStore implements LeaseStore {
  mode: 'up' | 'down' | 'stalled' = 'up';
  constructor(private readonly inner: LeaseStore) {}
  get instanceId(): string {
    return this.inner.instanceId;
  }
  private call<T>(fn: () => Promise<T>): Promise<T> {
    if (this.mode === 'down') return Promise.reject(new Error('connection refused'));
    if (this.mode === 'stalled') return new Promise<T>(() => {});
    return fn();
  }
  connected = (t?: number): Promise<void> => this.call(() => this.inner.connected(t));
  heartbeat = (claim?: boolean): Promise<string[]> => this.call(() => this.inner.heartbeat(claim));
  leave = (): Promise<void> => this.call(() => this.inner.leave());
  acquire = (p: number): Promise<number | undefined> => this.call(() => this.inner.acquire(p));
  reissue = (p: number, t: number): Promise<number | undefined> =>
    this.call(() => this.inner.reissue(p, t));
  renew = (p: number, t: number): Promise<boolean> => this.call(() => this.inner.renew(p, t));
  release = (p: number, t: number): Promise<boolean> => this.call(() => this.inner.release(p, t));
  holders = (n: number): Promise<(LeaseHolder | undefined)[]> =>
    this.call(() => this.inner.holders(n));
  lock = (ms: number): Promise<boolean> => this.call(() => this.inner.lock(ms));
  unlock = (): Promise<void> => this.call(() => this.inner.unlock());
  close = (): Promise<void> => this.inner.close();
}

/**
 * What the processes of one test share: one memory backend, and what their hosts did, in order.
 * Made anew for each test ({@link resetWorld}, with fake timers on).
 */
export const world = { backend: new MemoryStoreBackend(), events: [] as HostEvent[] };

export function resetWorld(): void {
  world.backend = new MemoryStoreBackend();
  world.events = [];
}

/**
 * One process: its lease store (faulty on demand), its leases, its coordinator and what its host
 * ran. `stopMs` is how long a stop of a partition takes (a final checkpoint), by partition.
 */
export function member(
  instanceId: string,
  incarnation = 'i1',
  o: { partitions?: number; stopMs?: (p: number) => number } = {},
) {
  const store = new FaultyLeaseStore(
    new MemoryLeaseStore(world.backend, instanceId, incarnation, TTL),
  );
  const logs: string[] = [];
  const log = (level: string, message: string): void => void logs.push(`${level} ${message}`);
  const running = new Map<number, number>();
  const host: PartitionHost = {
    start(p, token) {
      world.events.push({ who: instanceId + incarnation, op: 'start', p, token, at: Date.now() });
      running.set(p, token);
    },
    async stop(p, reason) {
      world.events.push({ who: instanceId + incarnation, op: 'stop', p, reason, at: Date.now() });
      running.delete(p);
      const ms = o.stopMs?.(p) ?? 0;
      if (ms > 0) await new Promise((r) => setTimeout(r, ms));
      world.events.push({
        who: instanceId + incarnation,
        op: 'stopped',
        p,
        reason,
        at: Date.now(),
      });
    },
  };
  const held = new HeldLeases(store, log);
  const coordinator = new LeaseCoordinator(store, held, host, {
    partitions: o.partitions ?? P,
    ttlMs: TTL,
    renewMs: RENEW,
    log,
  });
  const who = instanceId + incarnation;
  const stops = (reason: StopReason): number[] =>
    world.events.flatMap((e) =>
      e.who === who && e.op === 'stop' && e.reason === reason ? [e.p] : [],
    );
  return { store, held, coordinator, running, logs, stops, who };
}

export const sorted = (m: Map<number, number>): number[] => [...m.keys()].sort((a, b) => a - b);

/** Lets `ms` pass, one renewal interval at a time, checking no partition is held by two processes. */
export async function elapse(ms: number, ...ps: ReturnType<typeof member>[]): Promise<void> {
  for (let t = 0; t < ms; t += RENEW) {
    await vi.advanceTimersByTimeAsync(RENEW);
    const seen = new Map<number, string>();
    for (const x of ps)
      for (const p of x.running.keys()) {
        expect(seen.get(p), `partition ${p} runs in two processes`).toBeUndefined();
        seen.set(p, x.who);
      }
  }
}
