import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { startRedis, type ServerHandle } from '../../scripts/local-servers.js';
import { eventually, metricSum, startTestServers, type TestServers } from './servers.js';
import type { ServiceProcess } from './service-process.js';
import {
  balanced,
  holding,
  leaseMember,
  RENEW_MS,
  TTL_MS,
  type ReadyBody,
} from './lease-processes.js';

let servers: TestServers | undefined;
let processes: ServiceProcess[] = [];
/** The redis-server started again (the servers' own handle stops the first one). */
let restartedRedis: ServerHandle | undefined;

afterEach(async () => {
  for (const p of processes) await p.kill();
  processes = [];
  await restartedRedis?.stop();
  restartedRedis = undefined;
  await servers?.stop();
  servers = undefined;
});

function member(s: TestServers, partitions: number, id: string): ServiceProcess {
  const p = leaseMember(s, partitions, id);
  processes.push(p);
  return p;
}

describe('a Redis outage with two processes sharing the partitions', () => {
  it('Redis down for longer than the lease TTL, then back: not ready meanwhile (503, with the reason), then each process takes back its own share, once: nothing moves twice', async () => {
    const P = 16;
    const s = (servers = await startTestServers({ partitions: P, redis: true }));
    const first = s.redis as ServerHandle;
    const a = member(s, P, 'proc-a');
    const b = member(s, P, 'proc-b');
    await Promise.all([a.ready(), b.ready()]);
    const before = await balanced([a, b], P);
    const metrics = async (x: ServiceProcess): Promise<string> =>
      (await fetch(`${x.url}/metrics`)).text();
    const releasedBefore = await Promise.all(
      [a, b].map(async (x) =>
        metricSum(await metrics(x), 'vigil_lease_handoffs_total', ['reason', 'released']),
      ),
    );
    const readyz = async (x: ServiceProcess): Promise<{ status: number; body: ReadyBody }> => {
      const r = await fetch(`${x.url}/readyz`);
      return { status: r.status, body: (await r.json()) as ReadyBody };
    };
    const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

    // Who holds each lease, read in Redis every 20 ms (nothing while it is down).
    const raw = new Redis(first.url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => 20,
    });
    raw.on('error', () => {});
    const samples: { at: number; holders: string[] }[] = [];
    let sampling = true;
    const sampler = (async () => {
      const keys = Array.from({ length: P }, (_, p) => `vigil:lease:${p}`);
      while (sampling) {
        const values = await raw.mget(...keys).catch(() => undefined);
        if (values !== undefined)
          samples.push({ at: Date.now(), holders: values.map((v) => v?.split(' ')[0] ?? '-') });
        await sleep(20);
      }
    })();
    let upAt = 0;
    try {
      const stoppedAt = Date.now();
      await first.stop();
      await eventually(
        async () =>
          (await Promise.all([a, b].map(readyz))).every(
            (r) =>
              r.status === 503 &&
              /^lease store unreachable since /.test(r.body.ownership?.reason ?? ''),
          ),
        3 * RENEW_MS + 3000,
        'both processes to say the lease store is unreachable',
      );
      // Down for twice the TTL: every lease and registration lapses; not ready all along.
      const during: number[] = [];
      while (Date.now() < stoppedAt + 2 * TTL_MS + 500) {
        during.push(...(await Promise.all([a, b].map(readyz))).map((r) => r.status));
        await sleep(100);
      }
      expect(new Set(during)).toEqual(new Set([503]));
      expect((await Promise.all([a, b].map(holding))).map((h) => h.held)).toEqual([[], []]);
      restartedRedis = await startRedis({ dataDir: join(s.dir, 'redis'), port: first.port });
      upAt = Date.now();
      const after = await balanced([a, b], P);
      // Each took back the partitions it had.
      expect(after).toEqual(before);
    } finally {
      sampling = false;
      await sampler;
      await raw.quit().catch(() => raw.disconnect());
    }
    // Every partition, once it had a holder again, kept it: no process took more than its share
    // to give some up a moment later, and no partition waited for an owner after a hand-over.
    const since = samples.filter((x) => x.at >= upAt);
    expect(since.length).toBeGreaterThan(10);
    const timeline = Array.from({ length: P }, (_, p) =>
      since
        .map((x) => x.holders[p] ?? '-')
        .filter((h, i, all) => i === 0 || h !== all[i - 1])
        .join(' '),
    );
    const owner = (p: number): string => (before[0]?.includes(p) ? 'proc-a' : 'proc-b');
    expect(timeline).toEqual(
      timeline.map((t, p) => (t.startsWith('-') ? `- ${owner(p)}` : owner(p))),
    );
    // Each was held again within a renewal round or two of Redis being back (the clients
    // reconnect within TTL / 5), plus a margin for a loaded machine.
    for (let p = 0; p < P; p++) {
      const held = since.find((x) => x.holders[p] !== '-');
      expect((held?.at ?? Infinity) - upAt, `partition ${p}`).toBeLessThan(
        2 * RENEW_MS + TTL_MS / 5 + 2000,
      );
    }
    for (const [i, x] of [a, b].entries()) {
      await eventually(async () => (await readyz(x)).status === 200, 10_000, 'ready again');
      const text = await metrics(x);
      expect(metricSum(text, 'vigil_lease_handoffs_total', ['reason', 'released'])).toBe(
        releasedBefore[i],
      );
      expect(metricSum(text, 'vigil_lease_store_failures_total')).toBeGreaterThan(0);
      // The change of state is said once each way, not at every failed renewal.
      expect(x.output.match(/lease store unreachable \(/g)).toHaveLength(1);
      expect(x.output.match(/lease store reachable again after \d+ ms/g)).toHaveLength(1);
    }
    console.log(`redis outage: ${JSON.stringify({ before, timeline })}`);
  });
});
