import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Alert } from '../../rules/index.js';
import type { RunningService } from '../../service/index.js';
import {
  eventually,
  metricSum,
  replaceRules,
  startTestServers,
  startTestService,
  type TestServers,
  readAlerts,
} from './servers.js';

/**
 * Memory handed back after the key space shrinks: once expiry has removed many states and the
 * partitions are idle, a worker whose heap still commits much more than it uses is replaced by a
 * new thread. Its partitions stop with final checkpoints and restore in the new thread, so state
 * that is still live carries over and no alert is lost or repeated.
 */
const P = 2;
const KEYS = 12_000;
let servers: TestServers;
let service: RunningService;
const logs: string[] = [];

async function metrics(): Promise<string> {
  return (await fetch(`${service.url}/metrics`)).text();
}

async function alerts(): Promise<Alert[]> {
  return await readAlerts(servers);
}

beforeAll(async () => {
  servers = await startTestServers({ partitions: P, redis: true });
  ({ service } = await startTestService(
    servers,
    {
      partitions: P,
      workers: 1,
      // Under a loaded machine a batch of publications can take a second: its events, stamped
      // when the batch starts, must not be late against ticks written between two batches.
      outOfOrderMs: 1000,
      tickIntervalMs: 100,
      checkpointIntervalMs: 100,
      // Any room left after the collection is enough here: the test is about what a
      // replacement does, not about the default's threshold.
      workerRecycleSlackMb: 1,
    },
    (level, message) => {
      logs.push(`${level} ${message}`);
      if (level !== 'info') console.log(`[service ${level}] ${message}`);
    },
  ));
  await replaceRules(servers, service, P, [
    {
      id: 'burst',
      on: ['pay'],
      pattern: {
        kind: 'threshold',
        aggregate: 'count',
        window: '1s',
        operator: '>=',
        value: 2,
      },
    },
    {
      id: 'logins',
      on: ['login'],
      pattern: {
        kind: 'threshold',
        aggregate: 'count',
        window: '10m',
        operator: '>=',
        value: 2,
      },
    },
  ]);
});

afterAll(async () => {
  await service?.stop();
  await servers?.stop();
});

describe('worker threads replaced after mass expiry (real nats-server and redis-server)', () => {
  it('replaces an idle worker whose heap kept its room, and its live state carries over', async () => {
    // A state that must outlive the replacement: one login of ten minutes' window.
    await servers.js.publish('events.keep', JSON.stringify({ type: 'login', ts: Date.now() }));
    // Many keys whose one-second windows all end soon: their states expire together. Each
    // batch is stamped when it is sent, as a producer stamps its events: a time fixed before
    // all of them would fall behind event time while a slow machine publishes.
    for (let i = 0; i < KEYS; i += 1000) {
      const ts = Date.now();
      await Promise.all(
        Array.from({ length: 1000 }, (_, j) =>
          servers.js.publish(`events.u${i + j}`, JSON.stringify({ type: 'pay', ts })),
        ),
      );
    }
    await eventually(
      () => service.pool.status()[0]?.recycles === 1,
      60_000,
      'the worker to be replaced after its states expired',
    ).catch(async (err: unknown) => {
      // What the worker did meanwhile, to tell which condition did not hold.
      const text = await metrics();
      const expired = metricSum(text, 'vigil_state_expired_total');
      const live = metricSum(text, 'vigil_live_keys');
      const dlq = metricSum(text, 'vigil_dlq_total');
      throw new Error(
        `${(err as Error).message}; expired ${expired}, live keys ${live}, dead letters ${dlq}, status ${JSON.stringify(service.pool.status())}, log:\n${logs.join('\n')}`,
      );
    });
    await service.whenReady();
    const [worker] = service.pool.status();
    expect(worker?.restarts).toBe(0);
    expect(worker?.partitions).toEqual([0, 1]);
    expect(
      logs.some((l) =>
        /worker 0: replacing its thread, after expiry it holds .* MB of heap committed for .* MB of state arrays for/.test(
          l,
        ),
      ),
    ).toBe(true);
    const after = await metrics();
    expect(metricSum(after, 'vigil_worker_recycles_total')).toBe(1);
    // The old thread's counters carry over: totals never fall when a thread is replaced.
    expect(metricSum(after, 'vigil_events_total', ['outcome', 'judged'])).toBeGreaterThanOrEqual(
      KEYS + 1,
    );
    expect(metricSum(after, 'vigil_state_expired_total')).toBeGreaterThanOrEqual(KEYS);

    // The second login is judged with the first one's count, restored in the new thread.
    await servers.js.publish('events.keep', JSON.stringify({ type: 'login', ts: Date.now() }));
    await eventually(
      async () => (await alerts()).some((a) => a.ruleId === 'logins'),
      10_000,
      'the logins alert for the key kept across the replacement',
    );
    const got = await alerts();
    expect(got.filter((a) => a.ruleId === 'logins').map((a) => a.key)).toEqual(['keep']);
    expect(got.filter((a) => a.ruleId === 'burst')).toEqual([]);
    // One replacement: the new thread's partitions expired nothing more worth one.
    expect(service.pool.status()[0]?.recycles).toBe(1);
  });
});
