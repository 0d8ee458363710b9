import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Alert } from '../../rules/index.js';
import { startRedis, type RunningService, type ServerHandle } from '../../service/index.js';
import {
  activated,
  drained,
  eventually,
  readStream,
  startTestServers,
  startTestService,
  type TestServers,
} from './servers.js';

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
const decoder = new TextDecoder();

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
      rules: [
        {
          id: 'every',
          on: ['pay'],
          when: { all: [{ fact: 'type', operator: 'equal', value: 'pay' }] },
          alert: { severity: 'low' },
        },
        {
          id: 'burst',
          on: ['pay'],
          pattern: {
            kind: 'threshold',
            aggregate: 'count',
            window: '10s',
            operator: '>=',
            value: 1000,
          },
        },
      ],
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
    const ticksBefore = await ticks();
    // Within the bound of 500 ms, 50 ms apart: the partitions stop reading after 5 records each.
    const sent: string[] = [];
    for (let i = 0; i < 40; i++) {
      await send(`stalled-${i}`, 400);
      sent.push(`stalled-${i}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    // Two seconds of a reader that hears nothing: twenty tick intervals.
    expect(await ticks()).toBe(ticksBefore);
    redis = await startRedis({ dataDir: join(servers.dir, 'redis'), port: servers.redis?.port });
    await drained(servers, service, 60_000);
    await eventually(
      async () => {
        const ids = new Set(
          (await readStream(servers, 'ALERTS')).map(
            (m) => (JSON.parse(decoder.decode(m.data)) as Alert).events[0]?.id,
          ),
        );
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
    await eventually(async () => (await ticks()) > ticksBefore, 10_000, 'ticks again');
  });
});
