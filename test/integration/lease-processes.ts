import type { TestServers } from './servers.js';
import { eventually } from './servers.js';
import { ServiceProcess } from './service-process.js';

/*
 * Service processes sharing partitions through leases, as the multi-process tests run them: short
 * lease times, and what their /readyz says of the partitions they hold.
 */

export const TTL_MS = 1500;
export const RENEW_MS = 300;

/** A service process (not waited for) taking part in the leases, with short lease times. */
export function leaseMember(
  s: TestServers,
  partitions: number,
  id: string,
  env: Record<string, string> = {},
): ServiceProcess {
  return new ServiceProcess(s, partitions, {
    VIGIL_INSTANCE_ID: id,
    VIGIL_LEASE_TTL_MS: String(TTL_MS),
    VIGIL_LEASE_RENEW_MS: String(RENEW_MS),
    ...env,
  });
}

/** What /readyz answers (the parts these tests read). */
export interface ReadyBody {
  readonly ready: boolean;
  readonly ownership?: {
    readonly ready: boolean;
    readonly reason?: string;
    readonly held: number;
    readonly share?: number;
    readonly storeUnreachableSince?: string;
  };
  readonly workers: { partitions: number[]; starting: number[] }[];
}

/** Waits until the process serves HTTP (ready or not), and notes its URL. */
export async function listening(p: ServiceProcess): Promise<void> {
  await eventually(
    () => /HTTP on (\S+)/.test(p.output) || p.child.exitCode !== null,
    30_000,
    'the service to listen',
  );
  p.url = /HTTP on (\S+)/.exec(p.output)?.[1] ?? '';
  if (!p.url) throw new Error(`service did not start:\n${p.output}`);
}

export interface Holding {
  readonly held: number[];
  readonly running: number[];
}

/** The partitions a process holds, and those of them running, from its /readyz. */
export async function holding(p: ServiceProcess): Promise<Holding> {
  const body = (await (await fetch(`${p.url}/readyz`)).json()) as {
    workers: { partitions: number[]; starting: number[] }[];
  };
  const held = body.workers.flatMap((w) => w.partitions).sort((a, b) => a - b);
  const starting = new Set(body.workers.flatMap((w) => w.starting));
  return { held, running: held.filter((x) => !starting.has(x)) };
}

/**
 * Waits until the processes hold every partition once, each running, with shares of ⌊P/k⌋ or
 * ⌈P/k⌉, unchanged over several renewal intervals (so a rebalance is over). Returns the holdings.
 */
export async function balanced(ps: ServiceProcess[], partitions: number): Promise<number[][]> {
  const lo = Math.floor(partitions / ps.length);
  const hi = Math.ceil(partitions / ps.length);
  let last = '';
  let since = Date.now();
  let result: number[][] = [];
  await eventually(
    async () => {
      const hs = await Promise.all(ps.map(holding));
      const all = hs.flatMap((h) => h.running).sort((a, b) => a - b);
      const ok =
        all.length === partitions &&
        all.every((p, i) => p === i) &&
        hs.every((h) => h.held.length === h.running.length) &&
        hs.every((h) => h.held.length >= lo && h.held.length <= hi);
      const key = JSON.stringify(hs.map((h) => h.held));
      if (!ok || key !== last) {
        last = key;
        since = Date.now();
        return false;
      }
      result = hs.map((h) => h.held);
      return Date.now() - since >= 4 * RENEW_MS;
    },
    30_000,
    `${ps.length} processes to share ${partitions} partitions evenly`,
  );
  return result;
}
