import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningService } from '../../service/index.js';
import { startRedis, type ServerHandle } from '../../scripts/local-servers.js';
import {
  activated,
  drained,
  eventually,
  readStream,
  startTestServers,
  startTestService,
  type TestServers,
  readAlerts,
} from './servers.js';
import { TIME_RULES } from './time-rules.js';

/**
 * A partition that has stopped reading is not idle: while Redis is away its checkpoints fail, it
 * stops reading after a few records, and the events published meanwhile wait in the log. Its
 * reader hears nothing, but the server holds records for it: it gets no tick, so event time does
 * not move past the events waiting, and none of them is late once it reads again.
 */
const P = 2;
let servers: TestServers;
let service: RunningService;
let redis: ServerHandle | undefined;

const ticks = async (): Promise<number> =>
  (await readStream(servers, 'EVENTS')).filter((m) => m.subject.startsWith('events._tick.')).length;

beforeAll(async () => {
  servers = await startTestServers({ partitions: P, redis: true });
  redis = servers.redis;
  ({ service } = await startTestService(servers, {
    partitions: P,
    workers: 1,
    outOfOrderMs: 500,
    tickIntervalMs: 100,
    checkpointIntervalMs: 100,
    maxUncheckpointedRecords: 5,
  }));
  const { seq } = await servers.js.publish(
    'vigil.control',
    JSON.stringify({
      op: 'replace-all',
      rules: TIME_RULES,
    }),
  );
  await activated(service, seq, P);
});

afterAll(async () => {
  await service?.stop();
  await redis?.stop();
  await servers?.stop();
});

describe('ticks and a stalled reader (real nats-server and redis-server)', () => {
  it('writes no tick into a partition whose reader is held back, and no event waiting is late', async () => {
    const send = async (id: string, delayMs: number) =>
      servers.js.publish(
        `events.k${id}`,
        JSON.stringify({ type: 'pay', id, ts: Date.now() - delayMs }),
      );
    for (let i = 0; i < 4; i++) await send(`before-${i}`, 0);
    await drained(servers, service);
    await redis?.stop();
    // Within the bound of 500 ms, 50 ms apart: each partition stops reading after 5 records.
    // Before that a partition may be caught up for a moment and get a tick, as it should.
    const sent: string[] = [];
    const burst = async (n: number): Promise<void> => {
      for (let i = sent.length, end = sent.length + n; i < end; i++) {
        await send(`stalled-${i}`, 400);
        sent.push(`stalled-${i}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    await burst(20);
    await new Promise((r) => setTimeout(r, 300));
    const ticksStalled = await ticks();
    // Then two seconds of readers that hear nothing while their records wait: twenty tick
    // intervals, and no tick.
    await burst(20);
    await new Promise((r) => setTimeout(r, 1000));
    expect(await ticks()).toBe(ticksStalled);
    redis = await startRedis({ dataDir: join(servers.dir, 'redis'), port: servers.redis?.port });
    await drained(servers, service, 60_000);
    await eventually(
      async () => {
        const ids = new Set((await readAlerts(servers)).map((a) => a.events[0]?.id));
        return sent.every((id) => ids.has(id));
      },
      20_000,
      'every event judged',
    );
    const late = (await readStream(servers, 'DLQ')).filter(
      (m) => m.headers['Vigil-Reason'] === 'late',
    );
    expect(late).toEqual([]);
    // Once caught up again, the idle partitions get their ticks.
    await eventually(async () => (await ticks()) > ticksStalled, 10_000, 'ticks again');
  });
});
