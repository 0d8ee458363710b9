import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Alert } from '../../rules/index.js';
import { jetStreamPartitionSource, type RunningService } from '../../service/index.js';
import { partitionOf } from '../../protocol/index.js';
import {
  drained,
  eventually,
  metricSum,
  readStream,
  startTestServers,
  startTestService,
  type TestServers,
  publishControl,
  readAlerts,
} from './servers.js';
import { TIME_RULES } from './time-rules.js';

/**
 * Event time as a user meets it: in-order events are never late because of the service's own
 * ticks, a record from the future cannot poison a partition, and every record stored in EVENTS is
 * either judged or dead-lettered with a reason.
 */
const P = 4;
const OUT_OF_ORDER_MS = 500;
let servers: TestServers;
let service: RunningService;

const control = (m: unknown): Promise<number> => publishControl(servers, service, P, m);
const event = (key: string, e: Record<string, unknown>) =>
  servers.js.publish(`events.${key}`, JSON.stringify(e));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function alerts(rule: string): Promise<Alert[]> {
  return (await readAlerts(servers)).filter((a) => a.ruleId === rule);
}
async function deadLetters(): Promise<{ reason: string; subject: string; error: string }[]> {
  return (await readStream(servers, 'DLQ')).map((m) => ({
    reason: m.headers['Vigil-Reason'] ?? '',
    subject: m.headers['Vigil-Source-Subject'] ?? '',
    error: m.headers['Vigil-Error'] ?? '',
  }));
}
async function metrics(): Promise<string> {
  return (await fetch(`${service.url}/metrics`)).text();
}

beforeAll(async () => {
  servers = await startTestServers({ partitions: P });
  ({ service } = await startTestService(servers, {
    partitions: P,
    outOfOrderMs: OUT_OF_ORDER_MS,
    tickIntervalMs: 100,
  }));
  // `every` alerts on each event it judges (a late event is judged by no rule); `burst` buffers
  // events for its window, so idle partitions wait for event time and get ticks.
  await control({
    op: 'replace-all',
    rules: TIME_RULES,
  });
});

afterAll(async () => {
  await service?.stop();
  await servers?.stop();
});

describe('event time (real nats-server)', () => {
  it('never makes in-order events late with ticks: a delay up to outOfOrderMs, nor a steady delay three times that', async () => {
    const ticksBefore = (await readStream(servers, 'EVENTS')).filter((m) =>
      m.subject.startsWith('events._tick.'),
    ).length;
    // Two producers, each in order and each on partitions of its own (two producers whose delays
    // differ by more than outOfOrderMs are out of order by that much where they meet): one whose
    // events reach the log just inside the bound, one whose events arrive 1.5 s after their time.
    // Gaps of 600-800 ms leave each partition idle past the point where a tick releases its
    // buffered events (outOfOrderMs after the newest), so ticks come between two events.
    const keysOn = (prefix: string, parts: number[]): string[] =>
      Array.from({ length: 200 }, (_, i) => `${prefix}${i}`)
        .filter((k) => parts.includes(partitionOf(k, P)))
        .slice(0, 6);
    const producers = [
      { keys: keysOn('near', [0, 1]), delay: OUT_OF_ORDER_MS - 100 },
      { keys: keysOn('far', [2, 3]), delay: 3 * OUT_OF_ORDER_MS },
    ];
    const sent: string[] = [];
    for (let i = 0; i < 16; i++) {
      for (const { keys, delay } of producers) {
        const key = keys[i % keys.length] as string;
        const id = `${key}-${i}`;
        await event(key, { type: 'pay', id, ts: Date.now() - delay });
        sent.push(id);
      }
      await sleep(600 + ((i * 37) % 200));
    }
    await drained(servers, service);
    await eventually(async () => (await alerts('every')).length >= sent.length, 10_000, 'alerts');
    const judged = new Set((await alerts('every')).map((a) => a.events[0]?.id));
    expect(sent.filter((id) => !judged.has(id))).toEqual([]);
    expect((await deadLetters()).filter((d) => d.reason === 'late')).toEqual([]);
    // The test means something only if ticks were written between the events.
    const ticks = (await readStream(servers, 'EVENTS')).filter((m) =>
      m.subject.startsWith('events._tick.'),
    ).length;
    expect(ticks - ticksBefore).toBeGreaterThan(5);
  });

  it('refuses a forged far-future tick and moves nothing; an early event inside the future limit makes nothing late', async () => {
    const key = 'poison';
    const p = partitionOf(key, P);
    await servers.js.publish(
      `events._tick.${p}`,
      JSON.stringify({ vigil: 'tick', ts: Date.now() + 100 * 365 * 86_400_000 }),
    );
    await event(key, { type: 'pay', id: 'after-tick', ts: Date.now() });
    // An event 4 minutes ahead (the limit is 5): judged at its time, but event time moves no
    // further than the time the log stored it, so the next events are on time.
    await event(key, { type: 'pay', id: 'early', ts: Date.now() + 4 * 60_000 });
    for (let i = 0; i < 3; i++) {
      await sleep(50);
      await event(key, { type: 'pay', id: `after-early-${i}`, ts: Date.now() });
    }
    // Beyond the limit: refused, and it moves nothing either.
    await event(key, { type: 'pay', id: 'too-early', ts: Date.now() + 10 * 60_000 });
    await event(key, { type: 'pay', id: 'last', ts: Date.now() });
    await drained(servers, service);
    const want = ['after-tick', 'early', 'after-early-0', 'after-early-1', 'after-early-2', 'last'];
    await eventually(
      async () => {
        const ids = new Set((await alerts('every')).map((a) => a.events[0]?.id));
        return want.every((id) => ids.has(id));
      },
      10_000,
      'every on-time event judged',
    );
    const dlq = await deadLetters();
    const badTick = dlq.filter((d) => d.reason === 'bad-tick');
    expect(badTick).toHaveLength(1);
    expect(badTick[0]?.error).toContain('ticks are written by Vigil only');
    expect(dlq.filter((d) => d.reason === 'bad-ts')).toHaveLength(1);
    expect(dlq.filter((d) => d.reason === 'late')).toEqual([]);
    expect((await alerts('every')).some((a) => a.events[0]?.id === 'too-early')).toBe(false);
  });

  it('refuses records on partitions that do not exist, and dead-letters reserved keys', async () => {
    // EVENTS stores events.*.<p> for p in 0..P-1 only: a publish straight to another partition
    // token is refused by the server at once, so nothing is stored where no partition reads.
    for (const subject of [`events.k1.${P}`, 'events.k1.16', 'events.k1.abc'])
      await expect(
        servers.js.publish(subject, JSON.stringify({ type: 'pay' }), { timeout: 2000 }),
      ).rejects.toThrow();
    // `npm run pub` says so in one line, with the subjects the streams hold.
    const pub = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'scripts/pub.ts', 'events.k1.16', '{"type":"pay"}'],
      {
        cwd: resolve(import.meta.dirname, '../..'),
        env: { ...process.env, NATS_URL: servers.nats.url },
        encoding: 'utf8',
      },
    );
    expect(pub.status).toBe(1);
    expect(pub.stderr.trim()).toMatch(
      /^pub: events\.k1\.16 was not stored \(no stream stores this subject\); streams and their subjects: .*EVENTS: events\.\*\.0 events\.\*\.1 events\.\*\.2 events\.\*\.3/,
    );
    const info = await servers.jsm.streams.info('EVENTS');
    expect(info.config.subjects).toEqual(['events.*.0', 'events.*.1', 'events.*.2', 'events.*.3']);
    // Keys starting with "_" are Vigil's: a producer's record under one is dead-lettered, also
    // under a probe's key when it is not a probe.
    await event('_secret', { type: 'pay' });
    await event('_probe3', { type: 'pay' });
    await drained(servers, service);
    await eventually(
      async () => (await deadLetters()).filter((d) => d.reason === 'reserved-key').length === 2,
      10_000,
      'two reserved-key dead letters',
    );
    const subjects = (await deadLetters())
      .filter((d) => d.reason === 'reserved-key')
      .map((d) => d.subject.split('.')[1]);
    expect(subjects.sort()).toEqual(['_probe3', '_secret']);
    // Counted as the stream acknowledges them.
    await eventually(
      async () => metricSum(await metrics(), 'vigil_dlq_total', ['reason', 'reserved-key']) === 2,
      5000,
      'two reserved-key dead letters counted',
    );
  });

  it('tells a caught-up partition from one that is behind, asking the server', async () => {
    const part = 3;
    const key = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'].find((k) => partitionOf(k, P) === part);
    if (key === undefined) throw new Error('no key of partition 3');
    const from = (await servers.jsm.streams.info('EVENTS')).state.last_seq + 1;
    const source = await jetStreamPartitionSource(servers, part, from);
    try {
      expect(await source.caughtUp(from - 1)).toBe(true);
      const { seq } = await event(key, { type: 'pay' });
      // Stored, not yet taken: behind.
      await eventually(async () => !(await source.caughtUp(from - 1)), 5000, 'behind');
      let r;
      await eventually(() => (r = source.next()) !== undefined, 5000, 'the record');
      expect(r).toMatchObject({ seq });
      // Taken but not handled yet: still behind; handled: caught up.
      expect(await source.caughtUp(from - 1)).toBe(false);
      expect(await source.caughtUp(seq)).toBe(true);
      // Records of other partitions after it change nothing.
      const other = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'].find(
        (k) => partitionOf(k, P) !== part,
      );
      await event(other as string, { type: 'pay' });
      expect(await source.caughtUp(seq)).toBe(true);
    } finally {
      await source.stop();
    }
  });
});
