import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningService } from '../../service/index.js';
import {
  drained,
  eventually,
  metricSum,
  replaceRules,
  startTestServers,
  startTestService,
  type TestServers,
} from './servers.js';

/**
 * Keyed state as an operator sees it over time: a key space that keeps growing holds state only
 * for the keys whose windows (or suppression times) can still matter, in memory and in the Redis
 * checkpoint alike, and the metrics say so.
 */
const P = 4;
let servers: TestServers;
let service: RunningService;
let redis: Redis;

async function metrics(): Promise<string> {
  return (await fetch(`${service.url}/metrics`)).text();
}
async function checkpointedKeys(): Promise<number> {
  let n = 0;
  for (let p = 0; p < P; p++) n += await redis.hlen(`vigil:p:${p}:state`);
  return n;
}

beforeAll(async () => {
  servers = await startTestServers({ partitions: P, redis: true });
  ({ service } = await startTestService(servers, {
    partitions: P,
    outOfOrderMs: 200,
    tickIntervalMs: 100,
    checkpointIntervalMs: 100,
  }));
  redis = new Redis(servers.redis?.url ?? '');
  await replaceRules(servers, service, P, [
    {
      id: 'burst',
      on: ['pay'],
      pattern: {
        kind: 'threshold',
        aggregate: 'count',
        window: '3s',
        operator: '>=',
        value: 2,
      },
      alert: { severity: 'low', suppressFor: '4s' },
    },
    {
      id: 'spend',
      on: ['pay'],
      pattern: {
        kind: 'threshold',
        aggregate: 'sum',
        field: 'amount',
        window: '3500ms',
        operator: '>',
        value: 1e9,
      },
    },
  ]);
});

afterAll(async () => {
  redis?.disconnect();
  await service?.stop();
  await servers?.stop();
});

describe('state that ends (real nats-server and redis-server)', () => {
  it('removes the state of keys gone quiet, from memory and from the Redis checkpoint, by event time', async () => {
    // 200 distinct keys, two events each (so "burst" alerts and keeps a suppression time),
    // published at once: the windows are 3 s, and the first keys must not end before the last.
    const now = Date.now();
    await Promise.all(
      Array.from({ length: 400 }, (_, i) =>
        servers.js.publish(
          `events.u${i % 200}`,
          JSON.stringify({ type: 'pay', amount: 1, ts: now + Math.floor(i / 200) }),
        ),
      ),
    );
    await drained(servers, service);
    await eventually(async () => (await checkpointedKeys()) === 200, 10_000, '200 keys in Redis');
    await eventually(
      async () => metricSum(await metrics(), 'vigil_live_keys') === 200,
      5_000,
      '200 live keys',
    );
    // Nothing more arrives: idle partitions get ticks, event time moves on, and once the
    // windows (3.5 s) and suppression times (4 s) have run out every key is gone.
    await eventually(
      async () =>
        (await checkpointedKeys()) === 0 && metricSum(await metrics(), 'vigil_live_keys') === 0,
      15_000,
      'every key expired in memory and in Redis',
    );
    const text = await metrics();
    // Per (key, rule) state: 200 "spend" windows end by their window; 200 "burst" states end
    // when their suppression time does, which outlives the window.
    expect(metricSum(text, 'vigil_state_expired_total', ['reason', 'window'])).toBe(200);
    expect(metricSum(text, 'vigil_state_expired_total', ['reason', 'suppression'])).toBe(200);
    expect(metricSum(text, 'vigil_live_states')).toBe(0);
  });
});
