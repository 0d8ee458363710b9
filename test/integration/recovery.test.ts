import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Alert } from '../../rules/index.js';
import { startRedis } from '../../service/index.js';
import { prng } from '../prng.js';
import { partitionHeads, referenceAlertIds } from './reference.js';
import {
  eventually,
  readStream,
  startTestServers,
  startTestService,
  type TestServers,
} from './servers.js';

const P = 4;
const OUT_OF_ORDER_MS = 50;
const root = resolve(import.meta.dirname, '../..');
const decoder = new TextDecoder();

const RULES = [
  {
    id: 'big',
    on: ['payment'],
    key: 'k',
    when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 70 }] },
  },
  {
    id: 'burst',
    on: ['payment'],
    key: 'k',
    pattern: { kind: 'threshold', aggregate: 'count', window: 300, operator: '>=', value: 3 },
  },
  {
    id: 'spend',
    on: ['payment'],
    key: 'k',
    pattern: {
      kind: 'threshold',
      aggregate: 'sum',
      field: 'amount',
      window: 400,
      windowType: 'tumbling',
      operator: '>',
      value: 150,
    },
  },
  {
    id: 'login-pay',
    on: ['login', 'payment'],
    key: 'k',
    pattern: {
      kind: 'sequence',
      within: 600,
      steps: [
        { name: 'l', on: ['login'] },
        { name: 'p', on: ['payment'] },
      ],
    },
  },
  {
    id: 'unconfirmed',
    on: ['order'],
    key: 'k',
    pattern: { kind: 'absence', within: 200, expect: { on: ['confirm'] } },
  },
];

/** One service process (`service/main.ts`), as in production: it can be killed with SIGKILL. */
class ServiceProcess {
  readonly child: ChildProcess;
  url = '';
  output = '';

  constructor(servers: TestServers) {
    this.child = spawn(process.execPath, ['--import', 'tsx', 'service/main.ts'], {
      cwd: root,
      env: {
        ...process.env,
        NATS_URL: servers.nats.url,
        REDIS_URL: servers.redis?.url ?? '',
        VIGIL_PARTITIONS: String(P),
        VIGIL_WORKERS: '2',
        VIGIL_HTTP_PORT: '0',
        VIGIL_OUT_OF_ORDER_MS: String(OUT_OF_ORDER_MS),
        VIGIL_TICK_INTERVAL_MS: '0',
        VIGIL_CHECKPOINT_INTERVAL_MS: '100',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child.stdout?.on('data', (c: Buffer) => (this.output += c.toString()));
    this.child.stderr?.on('data', (c: Buffer) => (this.output += c.toString()));
  }

  async ready(): Promise<void> {
    await eventually(
      () => /HTTP on (\S+)/.test(this.output) || this.child.exitCode !== null,
      30_000,
      'the service to start',
    );
    this.url = /HTTP on (\S+)/.exec(this.output)?.[1] ?? '';
    if (!this.url) throw new Error(`service did not start:\n${this.output}`);
    await eventually(
      async () => (await fetch(`${this.url}/readyz`).catch(() => undefined))?.status === 200,
      30_000,
      'the service to be ready',
    );
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    await new Promise<void>((r) =>
      this.child.exitCode !== null || this.child.signalCode !== null
        ? r()
        : this.child.once('exit', () => r()),
    );
  }

  /** EVENTS sequence each partition has processed, from /metrics. */
  async offsets(): Promise<number[]> {
    const text = await (await fetch(`${this.url}/metrics`)).text();
    return Array.from({ length: P }, (_, p) => {
      const line = text
        .split('\n')
        .find((l) => l.startsWith(`vigil_partition_offset{partition="${p}"}`));
      return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
    });
  }
}

let servers: TestServers;
const processes: ServiceProcess[] = [];

beforeAll(async () => {
  servers = await startTestServers({ partitions: P, redis: true });
});

afterAll(async () => {
  for (const p of processes) await p.kill();
  await servers?.stop();
});

async function publishEvents(
  random: () => number,
  from: number,
  count: number,
  base: number,
): Promise<void> {
  const types = ['payment', 'payment', 'payment', 'login', 'order', 'confirm'];
  for (let i = from; i < from + count; i++) {
    const k = `k${Math.floor(random() * 16)}`;
    await servers.js.publish(
      `events.${k}`,
      JSON.stringify({
        type: types[Math.floor(random() * types.length)],
        k,
        amount: Math.floor(random() * 100),
        ts: base + i * 5 - Math.floor(random() * 40),
        id: `e${i}`,
      }),
    );
  }
}

describe('exact recovery (G3): kill -9 at random moments, restart, same alerts as a crash-free run', () => {
  it('20 kills over one growing log: no alert lost, none published twice', async () => {
    const seed = Number(process.env.VIGIL_TEST_SEED ?? Date.now() % 100_000);
    const random = prng(seed);
    const base = Date.now();
    let published = 0;
    for (let trial = 0; trial < 20; trial++) {
      const svc = new ServiceProcess(servers);
      processes.push(svc);
      await svc.ready();
      // The service creates the streams; the rules go in once it has.
      if (trial === 0)
        await servers.js.publish(
          'vigil.control',
          JSON.stringify({ op: 'replace-all', rules: RULES }),
        );
      // Events flow while the process runs; it dies at a random moment, mid-stream.
      const batch = 150 + Math.floor(random() * 150);
      const flowing = publishEvents(random, published, batch, base);
      published += batch;
      if (trial === 7)
        await servers.js.publish(
          'vigil.control',
          JSON.stringify({
            op: 'upsert-rule',
            rule: {
              ...RULES[0],
              when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 50 }] },
            },
          }),
        );
      await new Promise((r) => setTimeout(r, 50 + Math.floor(random() * 400)));
      await svc.kill('SIGKILL');
      await flowing;
      // A rule change while no process runs is applied at the same log position after recovery.
      if (trial === 12)
        await servers.js.publish('vigil.control', JSON.stringify({ op: 'clear-state' }));
    }
    const last = new ServiceProcess(servers);
    processes.push(last);
    await last.ready();
    const heads = await partitionHeads(servers, P);
    await eventually(
      async () => (await last.offsets()).every((o, p) => o >= (heads[p] ?? 0)),
      30_000,
      'the last process to catch up',
    );
    await last.kill('SIGTERM'); // a clean stop flushes every alert
    const got = (await readStream(servers, 'ALERTS')).map(
      (m) => JSON.parse(decoder.decode(m.data)) as Alert,
    );
    const ids = got.map((a) => a.id);
    const expected = await referenceAlertIds(servers, P, OUT_OF_ORDER_MS);
    expect(expected.size, `seed ${seed}: the run must produce alerts`).toBeGreaterThan(100);
    expect(ids.length - new Set(ids).size, `seed ${seed}: alerts published twice`).toBe(0);
    expect(
      [...expected].filter((id) => !ids.includes(id)),
      `seed ${seed}: alerts lost`,
    ).toEqual([]);
    expect(
      ids.filter((id) => !expected.has(id)),
      `seed ${seed}: alerts the reference does not produce`,
    ).toEqual([]);
    console.log(
      `recovery: seed ${seed}, ${published} events, 20 kills, ${expected.size} alerts, 0 lost, 0 duplicated`,
    );
  });

  it('a worker thread that dies is restarted and its partitions recover, without restarting the process', async () => {
    const own = await startTestServers({ partitions: P, redis: true });
    const { service } = await startTestService(own, {
      partitions: P,
      workers: 2,
      outOfOrderMs: OUT_OF_ORDER_MS,
      tickIntervalMs: 0,
      checkpointIntervalMs: 100,
    });
    try {
      await own.js.publish('vigil.control', JSON.stringify({ op: 'replace-all', rules: RULES }));
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
      await service.pool.terminate(0);
      await flowing;
      await service.whenReady(30_000);
      expect(service.pool.status()[0]?.restarts).toBe(1);
      const heads = await partitionHeads(own, P);
      await eventually(
        async () => {
          const text = await (await fetch(`${service.url}/metrics`)).text();
          return heads.every((h, p) => {
            const line = text
              .split('\n')
              .find((l) => l.startsWith(`vigil_partition_offset{partition="${p}"}`));
            return (
              h === 0 || (line !== undefined && Number(line.slice(line.lastIndexOf(' ') + 1)) >= h)
            );
          });
        },
        30_000,
        'every partition to catch up',
      );
      await service.stop();
      const ids = (await readStream(own, 'ALERTS')).map(
        (m) => (JSON.parse(decoder.decode(m.data)) as Alert).id,
      );
      const expected = await referenceAlertIds(own, P, OUT_OF_ORDER_MS);
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
      const heads = await partitionHeads(own, P);
      await eventually(
        async () => {
          const text = await (await fetch(`${service.url}/metrics`)).text();
          return heads.every((h, p) => {
            const line = text
              .split('\n')
              .find((l) => l.startsWith(`vigil_partition_offset{partition="${p}"}`));
            return (
              h === 0 || (line !== undefined && Number(line.slice(line.lastIndexOf(' ') + 1)) >= h)
            );
          });
        },
        30_000,
        'every partition to catch up',
      );
      await service.stop();
      const ids = (await readStream(own, 'ALERTS')).map(
        (m) => (JSON.parse(decoder.decode(m.data)) as Alert).id,
      );
      expect(new Set(ids)).toEqual(await referenceAlertIds(own, P, OUT_OF_ORDER_MS));
    } finally {
      await service.stop().catch(() => undefined);
      await redis?.stop();
      await own.stop();
    }
  });
});
