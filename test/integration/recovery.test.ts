import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { startNats, startRedis } from '../../scripts/local-servers.js';
import { prng } from '../prng.js';
import { caughtUp, referenceAlertIds, rekeyCaughtUp } from './reference.js';
import { CRASH_RULES, crashRun, REKEY, REKEY_OPTIONS } from './crash-run.js';
import type { ServiceProcess } from './service-process.js';
import {
  eventually,
  replaceRules,
  startTestServers,
  startTestService,
  type TestServers,
  readAlerts,
} from './servers.js';

const P = 4;
const OUT_OF_ORDER_MS = 50;

const RULES = CRASH_RULES;

let servers: TestServers;
const processes: ServiceProcess[] = [];

beforeAll(async () => {
  servers = await startTestServers({ partitions: P, redis: true });
});

afterAll(async () => {
  for (const p of processes) await p.kill();
  await servers?.stop();
});

describe('exact recovery (G3): kill -9 at random moments, restart, same alerts as a crash-free run', () => {
  it('20 kills over one growing log: no alert lost, none published twice', async () => {
    const seed = Number(process.env.VIGIL_TEST_SEED ?? Date.now() % 100_000);
    const r = await crashRun(servers, {
      trials: 20,
      seed,
      partitions: P,
      outOfOrderMs: OUT_OF_ORDER_MS,
      track: (p) => processes.push(p),
    });
    expect(r.alertsExpected, `seed ${seed}: the run must produce alerts`).toBeGreaterThan(100);
    expect(r.alertsRekeyed, `seed ${seed}: alerts through the re-keying hop`).toBeGreaterThan(10);
    expect(
      { lost: r.lost, duplicated: r.duplicated, unexpected: r.unexpected },
      `seed ${seed}`,
    ).toEqual({ lost: 0, duplicated: 0, unexpected: 0 });
    console.log(`recovery: ${JSON.stringify(r)}`);
  });

  it('a worker thread that dies is restarted and its partitions recover, without restarting the process', async () => {
    const own = await startTestServers({ partitions: P, redis: true });
    const { service } = await startTestService(own, {
      partitions: P,
      workers: 2,
      outOfOrderMs: OUT_OF_ORDER_MS,
      tickIntervalMs: 0,
      checkpointIntervalMs: 100,
      ...REKEY_OPTIONS,
    });
    try {
      await replaceRules(own, service, P, RULES);
      const random = prng(7);
      const base = Date.now();
      const flowing = (async () => {
        for (let i = 0; i < 600; i++) {
          const k = `k${Math.floor(random() * 16)}`;
          await own.js.publish(
            `events.${k}`,
            JSON.stringify({
              type: 'payment',
              k,
              amount: Math.floor(random() * 100),
              ts: base + i * 5,
              id: `w${i}`,
            }),
          );
        }
      })();
      await new Promise((r) => setTimeout(r, 300));
      const before = service.ownership?.leases() ?? new Map<number, number>();
      const terminatedAt = Date.now();
      await service.pool.terminate(0);
      await flowing;
      await service.whenReady(30_000);
      const restarted = service.pool.status()[0];
      expect(restarted?.restarts).toBe(1);
      // Its partitions run under new fencing tokens: a late write of the dead thread is refused.
      const after = service.ownership?.leases() ?? new Map<number, number>();
      expect(restarted?.partitions.length).toBeGreaterThan(0);
      for (const p of restarted?.partitions ?? [])
        expect(after.get(p), `partition ${p}`).toBeGreaterThan(before.get(p) ?? Infinity);
      // /readyz says when each partition of the new thread began reading, and what its restore took.
      expect(restarted?.started.map((s) => s.partition)).toEqual(restarted?.partitions);
      for (const s of restarted?.started ?? []) {
        expect(s.at).toBeGreaterThanOrEqual(terminatedAt);
        expect(Math.min(s.loadMs, s.restoreMs, s.consumerMs, s.keys)).toBeGreaterThanOrEqual(0);
      }
      await caughtUp(own, service, P, 30_000);
      await rekeyCaughtUp(own, service.url);
      await service.stop();
      const ids = (await readAlerts(own)).map((a) => a.id);
      const expected = await referenceAlertIds(own, P, OUT_OF_ORDER_MS, REKEY);
      expect(expected.size).toBeGreaterThan(50);
      expect(new Set(ids)).toEqual(expected);
      expect(ids.length).toBe(expected.size);
    } finally {
      await service.stop().catch(() => undefined);
      await own.stop();
    }
  });

  it('redis-server restarted mid-run: readiness shows it, processing resumes by itself, nothing lost', async () => {
    const own = await startTestServers({ partitions: P, redis: true });
    const { service } = await startTestService(own, {
      partitions: P,
      workers: 2,
      outOfOrderMs: OUT_OF_ORDER_MS,
      tickIntervalMs: 0,
      checkpointIntervalMs: 100,
      ...REKEY_OPTIONS,
    });
    let redis = own.redis;
    try {
      await own.js.publish('vigil.control', JSON.stringify({ op: 'replace-all', rules: RULES }));
      const random = prng(11);
      const base = Date.now();
      let i = 0;
      const publish = async (n: number): Promise<void> => {
        for (const end = i + n; i < end; i++) {
          const k = `k${Math.floor(random() * 16)}`;
          await own.js.publish(
            `events.${k}`,
            JSON.stringify({
              type: 'payment',
              k,
              amount: Math.floor(random() * 100),
              ts: base + i * 5,
              id: `r${i}`,
            }),
          );
        }
      };
      await publish(200);
      await redis?.stop();
      await publish(200);
      await eventually(
        async () => (await fetch(`${service.url}/readyz`)).status === 503,
        15_000,
        '/readyz to report failing checkpoints',
      );
      redis = await startRedis({ dataDir: join(own.dir, 'redis'), port: own.redis?.port });
      await publish(200);
      await eventually(
        async () => (await fetch(`${service.url}/readyz`)).status === 200,
        30_000,
        'the service to recover by itself',
      );
      await caughtUp(own, service, P, 30_000);
      await rekeyCaughtUp(own, service.url);
      await service.stop();
      const ids = (await readAlerts(own)).map((a) => a.id);
      expect(new Set(ids)).toEqual(await referenceAlertIds(own, P, OUT_OF_ORDER_MS, REKEY));
    } finally {
      await service.stop().catch(() => undefined);
      await redis?.stop();
      await own.stop();
    }
  });

  it('nats-server restarted mid-run (JetStream on disk): the service recovers by itself, nothing lost', async () => {
    const own = await startTestServers({ partitions: P, redis: true });
    const { service } = await startTestService(own, {
      partitions: P,
      workers: 2,
      outOfOrderMs: OUT_OF_ORDER_MS,
      tickIntervalMs: 0,
      checkpointIntervalMs: 100,
      ...REKEY_OPTIONS,
    });
    let nats = own.nats;
    const nc = await connect({
      servers: nats.url,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 100,
    });
    const js = jetstream(nc);
    try {
      await js.publish('vigil.control', JSON.stringify({ op: 'replace-all', rules: RULES }));
      const random = prng(13);
      const base = Date.now();
      let i = 0;
      const publish = async (n: number): Promise<void> => {
        for (const end = i + n; i < end; i++) {
          const k = `k${Math.floor(random() * 16)}`;
          // A producer retries while the server comes back.
          const body = JSON.stringify({
            type: 'payment',
            k,
            amount: Math.floor(random() * 100),
            ts: base + i * 5,
            id: `n${i}`,
          });
          for (let attempt = 0; ; attempt++) {
            try {
              await js.publish(`events.${k}`, body, { msgID: `n${i}`, timeout: 2000 });
              break;
            } catch (e) {
              if (attempt > 50) throw e;
              await new Promise((r) => setTimeout(r, 200));
            }
          }
        }
      };
      await publish(300);
      await nats.stop();
      // While the server is away nothing is judged, and readiness says so.
      await eventually(
        async () => (await fetch(`${service.url}/readyz`)).status === 503,
        10_000,
        '/readyz to report the lost NATS connection',
      );
      const away = (await (await fetch(`${service.url}/readyz`)).json()) as {
        workers: { natsConnected: boolean }[];
      };
      expect(away.workers.some((w) => !w.natsConnected)).toBe(true);
      nats = await startNats({ dataDir: join(own.dir, 'nats'), partitions: P, port: nats.port });
      await publish(300);
      await eventually(
        async () => (await fetch(`${service.url}/readyz`)).status === 200,
        30_000,
        '/readyz to recover with the connection',
      );
      await caughtUp(own, service, P, 60_000);
      await rekeyCaughtUp(own, service.url);
      await service.stop();
      const ids = (await readAlerts(own)).map((a) => a.id);
      expect(new Set(ids)).toEqual(await referenceAlertIds(own, P, OUT_OF_ORDER_MS, REKEY));
      expect(ids.length).toBe(new Set(ids).size);
    } finally {
      await service.stop().catch(() => undefined);
      await nc.close();
      await nats.stop();
      await own.stop();
    }
  });
});
