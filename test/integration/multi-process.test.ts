import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { prng } from '../prng.js';
import { partitionOf } from '../../protocol/index.js';
import { CRASH_RULES, REKEY, REKEY_ENV, TIGHTEN_BIG } from './crash-run.js';
import { partitionHeads, processesCaughtUp, referenceAlertIds } from './reference.js';
import {
  eventually,
  metricSum,
  readStream,
  startTestServers,
  type TestServers,
  readAlerts,
} from './servers.js';
import type { ServiceProcess } from './service-process.js';
import {
  balanced,
  holding,
  leaseMember,
  listening,
  RENEW_MS,
  TTL_MS,
  type ReadyBody,
} from './lease-processes.js';

const OUT_OF_ORDER_MS = 50;
const decoder = new TextDecoder();

let servers: TestServers | undefined;
let processes: ServiceProcess[] = [];

afterEach(async () => {
  for (const p of processes) await p.kill();
  processes = [];
  await servers?.stop();
  servers = undefined;
});

/** A service process sharing the partitions through leases, with short lease times. */
function member(
  s: TestServers,
  partitions: number,
  id: string,
  env: Record<string, string> = {},
): ServiceProcess {
  const p = leaseMember(s, partitions, id, {
    VIGIL_OUT_OF_ORDER_MS: String(OUT_OF_ORDER_MS),
    ...REKEY_ENV,
    ...env,
  });
  processes.push(p);
  return p;
}

async function publishEvents(
  s: TestServers,
  random: () => number,
  from: number,
  count: number,
  base: number,
): Promise<void> {
  const types = ['payment', 'payment', 'payment', 'login', 'order', 'confirm'];
  for (let i = from; i < from + count; i++) {
    const k = `k${Math.floor(random() * 24)}`;
    await s.js.publish(
      `events.${k}`,
      JSON.stringify({
        type: types[Math.floor(random() * types.length)],
        k,
        amount: Math.floor(random() * 100),
        ts: base + i * 5 - Math.floor(random() * 40),
        id: `m${i}`,
      }),
    );
  }
}

describe('ownership across processes: leases with fencing tokens', () => {
  it('three processes, one killed with SIGKILL mid-run: its partitions move to the others within TTL + restore, and ALERTS equal a crash-free run', async () => {
    const P = 6;
    const s = (servers = await startTestServers({ partitions: P, redis: true }));
    const seed = Number(process.env.VIGIL_TEST_SEED ?? Date.now() % 100_000);
    const random = prng(seed);
    const base = Date.now();
    const a = member(s, P, 'proc-a');
    await a.ready();
    await s.js.publish('vigil.control', JSON.stringify({ op: 'replace-all', rules: CRASH_RULES }));
    // State builds up on one process, then moves with the clean handovers to the newcomers.
    await publishEvents(s, random, 0, 300, base);
    const b = member(s, P, 'proc-b');
    const c = member(s, P, 'proc-c');
    await Promise.all([b.ready(), c.ready()]);
    const before = await balanced([a, b, c], P);
    expect(before.map((h) => h.length)).toEqual([2, 2, 2]);

    const flowing = publishEvents(s, random, 300, 900, base);
    await new Promise((r) => setTimeout(r, 300 + Math.floor(random() * 500)));
    const handoffs = async (reason: string): Promise<number> => {
      const texts = await Promise.all(
        [a, c].map(async (x) => (await fetch(`${x.url}/metrics`)).text()),
      );
      return texts.reduce(
        (n, t) => n + metricSum(t, 'vigil_lease_handoffs_total', ['reason', reason]),
        0,
      );
    };
    const acquiredBefore = await handoffs('acquired');
    const releasedBefore = await handoffs('released');
    const killedAt = Date.now();
    await b.kill('SIGKILL');
    const survivors = [a, c];
    // A change while b's partitions have no owner: their new owners must write its marker.
    await s.js.publish('vigil.control', TIGHTEN_BIG);
    await eventually(
      async () =>
        (await Promise.all(survivors.map(holding))).flatMap((h) => h.running).length === P,
      TTL_MS + 10_000,
      "b's partitions to run on the survivors",
    );
    const takeoverMs = Date.now() - killedAt;
    expect(takeoverMs).toBeLessThan(TTL_MS + 5000);
    const after = await balanced(survivors, P);
    expect(after.map((h) => h.length)).toEqual([3, 3]);
    // The survivors keep what they had and take b's: nothing else moves.
    expect(after[0]).toEqual(expect.arrayContaining(before[0] ?? []));
    expect(after[1]).toEqual(expect.arrayContaining(before[2] ?? []));
    await flowing;

    await processesCaughtUp(s, [a, c], P, 'the survivors to catch up');
    const metrics = await Promise.all(
      [a, c].map(async (x) => (await fetch(`${x.url}/metrics`)).text()),
    );
    expect(metrics.reduce((n, t) => n + metricSum(t, 'vigil_leases_held'), 0)).toBe(P);
    // After the kill, only b's partitions changed hands: taken, none given up, none lost.
    expect(await handoffs('acquired')).toBe(acquiredBefore + P / 3);
    expect(await handoffs('released')).toBe(releasedBefore);
    expect(await handoffs('lost')).toBe(0);
    await Promise.all([a.kill('SIGTERM'), c.kill('SIGTERM')]);

    // Every partition got a marker for every control message, whoever owned it at the time.
    const control = await readStream(s, 'CONTROL');
    const markers = new Map<number, Set<number>>();
    for (const m of await readStream(s, 'EVENTS')) {
      const [, key, p] = m.subject.split('.');
      if (key !== '_vigil') continue;
      const c0 = (JSON.parse(decoder.decode(m.data)) as { controlSeq: number }).controlSeq;
      markers.set(Number(p), (markers.get(Number(p)) ?? new Set()).add(c0));
    }
    for (let p = 0; p < P; p++)
      expect([...(markers.get(p) ?? [])].sort()).toEqual(control.map((m) => m.seq));

    const ids = (await readAlerts(s)).map((a) => a.id);
    const expected = await referenceAlertIds(s, P, OUT_OF_ORDER_MS, REKEY);
    const got = new Set(ids);
    expect(expected.size, `seed ${seed}`).toBeGreaterThan(100);
    expect(
      {
        lost: [...expected].filter((id) => !got.has(id)).length,
        duplicated: ids.length - got.size,
        unexpected: [...got].filter((id) => !expected.has(id)).length,
      },
      `seed ${seed}`,
    ).toEqual({ lost: 0, duplicated: 0, unexpected: 0 });
    console.log(
      `multi-process: ${JSON.stringify({ seed, takeoverMs, alerts: expected.size, before, after })}`,
    );
  });

  it('a partition whose lease is taken away stops at once (no more alerts from it) and is taken back only once free', async () => {
    const P = 4;
    const s = (servers = await startTestServers({ partitions: P, redis: true }));
    const a = member(s, P, 'proc-a');
    await a.ready();
    await s.js.publish('vigil.control', JSON.stringify({ op: 'replace-all', rules: CRASH_RULES }));
    await balanced([a], P);
    const keys = Array.from({ length: 200 }, (_, i) => `x${i}`).filter(
      (k) => partitionOf(k, P) === 2,
    );
    const big = async (id: string, k: string) =>
      s.js.publish(`events.${k}`, JSON.stringify({ type: 'payment', k, amount: 90, id }));
    const alertsFor = async (prefix: string): Promise<string[]> =>
      (await readAlerts(s))
        .filter((al) => al.ruleId === 'big' && al.events.some((e) => e.id?.startsWith(prefix)))
        .map((al) => al.id);
    await big('before-0', keys[0] ?? '');
    await eventually(
      async () => (await alertsFor('before-')).length === 1,
      10_000,
      'a first alert',
    );

    // Another owner takes partition 2 by force, with a newer token (a zombie-maker: a's lease is gone).
    const redis = new Redis(s.redis?.url ?? '');
    try {
      const token = await redis.incr('vigil:lease:2:token');
      await redis.set('vigil:lease:2', `ghost g1 ${token}`, 'PX', 4000);
      await eventually(
        async () => !(await holding(a)).held.includes(2),
        3 * RENEW_MS + 2000,
        'a to drop partition 2',
      );
      const text = await (await fetch(`${a.url}/metrics`)).text();
      expect(metricSum(text, 'vigil_lease_handoffs_total', ['reason', 'lost'])).toBe(1);
      expect(text).not.toMatch(/vigil_partition_offset\{partition="2"\}/);
      for (let i = 0; i < 5; i++) await big(`during-${i}`, keys[i % keys.length] ?? '');
      await new Promise((r) => setTimeout(r, 1000));
      expect(await alertsFor('during-')).toEqual([]);
      // Once the other owner's lease expires, a takes partition 2 back (new token) and replays.
      await eventually(
        async () => (await holding(a)).running.includes(2),
        6000,
        'a to take partition 2 back',
      );
      expect(Number((await redis.get('vigil:lease:2'))?.split(' ')[2])).toBeGreaterThan(token);
      await eventually(async () => (await alertsFor('during-')).length === 5, 10_000, 'the replay');
    } finally {
      await redis.quit();
    }
  });

  it('Redis stalled for longer than the lease TTL: the partitions stop before the leases can expire, and come back by themselves, nothing lost', async () => {
    const P = 4;
    const s = (servers = await startTestServers({ partitions: P, redis: true }));
    const a = member(s, P, 'proc-a');
    await a.ready();
    await s.js.publish('vigil.control', JSON.stringify({ op: 'replace-all', rules: CRASH_RULES }));
    await balanced([a], P);
    const random = prng(3);
    const base = Date.now();
    await publishEvents(s, random, 0, 200, base);
    const redis = new Redis(s.redis?.url ?? '');
    try {
      const pausedAt = Date.now();
      await redis.call('CLIENT', 'PAUSE', '4000', 'ALL');
      const flowing = publishEvents(s, random, 200, 200, base);
      // Renewals hang: the process gives every lease up on its own clock, while Redis is still paused.
      await eventually(
        async () => (await holding(a)).held.length === 0,
        3500,
        'the partitions to stop while Redis is paused',
      );
      expect(Date.now() - pausedAt).toBeLessThan(4000);
      await flowing;
      await balanced([a], P);
      const text = await (await fetch(`${a.url}/metrics`)).text();
      expect(metricSum(text, 'vigil_lease_handoffs_total', ['reason', 'lost'])).toBe(P);
    } finally {
      await redis.quit();
    }
    await publishEvents(s, random, 400, 200, base);
    await processesCaughtUp(s, [a], P, 'a to catch up', 30_000);
    await a.kill('SIGTERM');
    const ids = (await readAlerts(s)).map((a) => a.id);
    const expected = await referenceAlertIds(s, P, OUT_OF_ORDER_MS, REKEY);
    expect(expected.size).toBeGreaterThan(100);
    expect(new Set(ids)).toEqual(expected);
    expect(ids.length).toBe(expected.size);
  });

  it('a process restarted under the same instance id takes its partitions back at once, not after the lease TTL', async () => {
    const P = 4;
    const s = (servers = await startTestServers({ partitions: P, redis: true }));
    const long = { VIGIL_LEASE_TTL_MS: '40000', VIGIL_LEASE_RENEW_MS: '1000' };
    const first = member(s, P, 'proc-a', long);
    await first.ready();
    await balanced([first], P);
    await first.kill('SIGKILL');
    const restartedAt = Date.now();
    const again = member(s, P, 'proc-a', long);
    await again.ready();
    const [held] = await balanced([again], P);
    expect(held).toEqual([0, 1, 2, 3]);
    const backMs = Date.now() - restartedAt;
    console.log(`restart under the same id: partitions back ${backMs} ms after the new start`);
    // Process start-up (4 s here, 10 s on a loaded machine) plus one renewal; far below the
    // 40 s TTL the old leases would otherwise have to expire in.
    expect(backMs).toBeLessThan(25_000);
    // Another instance id gets nothing until the TTL: the dead one's leases still count.
    await again.kill('SIGKILL');
    const other = member(s, P, 'proc-z', long);
    await listening(other);
    await new Promise((r) => setTimeout(r, 2000));
    expect((await holding(other)).held).toEqual([]);
    // It judges nothing while its share (2: the dead one is still a member) is held there: not ready.
    const res = await fetch(`${other.url}/readyz`);
    expect(res.status).toBe(503);
    expect(((await res.json()) as ReadyBody).ownership).toMatchObject({
      ready: false,
      reason: expect.stringMatching(/^holds no partition; its share is 2/) as string,
      held: 0,
      share: 2,
    });
  });

  it('balanced assignment: 1 → 2 → 3 processes and back to 2; only the partitions that must move do, each after a final checkpoint', async () => {
    const P = 8;
    const s = (servers = await startTestServers({ partitions: P, redis: true }));
    // No periodic checkpoint within the test: only the final one of a hand-over can spare the
    // new owner a replay.
    const env = { VIGIL_CHECKPOINT_INTERVAL_MS: '120000' };
    const a = member(s, P, 'proc-a', env);
    await a.ready();
    const [one] = await balanced([a], P);
    expect(one).toHaveLength(8);
    await s.js.publish('vigil.control', JSON.stringify({ op: 'replace-all', rules: CRASH_RULES }));
    await publishEvents(s, prng(5), 0, 200, Date.now());
    const heads = await partitionHeads(s, P);
    await eventually(
      async () => (await a.offsets()).every((o, p) => o >= (heads[p] ?? 0)),
      30_000,
      'a to read everything',
    );
    // Records of the event log read, less the start-up mapping probes each new process
    // publishes (the key spaces' partitions, `<p>~<space>`, count what they read of REKEY).
    const records = async (x: ServiceProcess) => {
      const text = await (await fetch(`${x.url}/metrics`)).text();
      const ofLog = text
        .split('\n')
        .filter((l) => !/^vigil_events_total\{[^}]*partition="\d+~/.test(l))
        .join('\n');
      return (
        metricSum(ofLog, 'vigil_events_total') -
        metricSum(ofLog, 'vigil_events_total', ['outcome', 'probe'])
      );
    };
    expect(await records(a)).toBe(200 + P);

    const b = member(s, P, 'proc-b', env);
    await b.ready();
    const two = await balanced([a, b], P);
    // b restored a's final checkpoints: it read no record again.
    expect(await records(b)).toBe(0);
    expect(two.map((h) => h.length)).toEqual([4, 4]);
    // a only gave partitions up; b only took what a gave.
    expect(one).toEqual(expect.arrayContaining(two[0] ?? []));

    const c = member(s, P, 'proc-c', env);
    await c.ready();
    const three = await balanced([a, b, c], P);
    expect(await records(c)).toBe(0);
    expect(three.map((h) => h.length).sort()).toEqual([2, 3, 3]);
    expect(two[0]).toEqual(expect.arrayContaining(three[0] ?? []));
    expect(two[1]).toEqual(expect.arrayContaining(three[1] ?? []));
    const moved = P - (three[0]?.length ?? 0) - (three[1]?.length ?? 0);
    expect(moved).toBe(three[2]?.length);

    // A clean stop hands its partitions over at once (no TTL wait) and nothing else moves.
    const stoppedAt = Date.now();
    await c.kill('SIGTERM');
    const back = await balanced([a, b], P);
    expect(Date.now() - stoppedAt).toBeLessThan(TTL_MS + 4 * RENEW_MS + 3000);
    expect(back.map((h) => h.length)).toEqual([4, 4]);
    expect(back[0]).toEqual(expect.arrayContaining(three[0] ?? []));
    expect(back[1]).toEqual(expect.arrayContaining(three[1] ?? []));
    console.log(`balance: ${JSON.stringify({ one, two, three, back })}`);
  });
});
