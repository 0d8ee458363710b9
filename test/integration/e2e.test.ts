import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Alert } from '../../rules/index.js';
import { type RunningService } from '../../service/index.js';
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

const P = 4;
let servers: TestServers;
let service: RunningService;

/** Publishes a control message and waits until every partition has applied it. */
const control = (m: unknown): Promise<number> => publishControl(servers, service, P, m);
const event = (key: string, e: Record<string, unknown>) =>
  servers.js.publish(`events.${key}`, JSON.stringify(e));

async function alerts(): Promise<Alert[]> {
  return await readAlerts(servers);
}

async function deadLetters(): Promise<{ reason: string; error: string; body: string }[]> {
  return (await readStream(servers, 'DLQ')).map((m) => ({
    reason: m.headers['Vigil-Reason'] ?? '',
    error: m.headers['Vigil-Error'] ?? '',
    body: new TextDecoder().decode(m.data),
  }));
}

beforeAll(async () => {
  servers = await startTestServers({ partitions: P });
  ({ service } = await startTestService(servers, {
    partitions: P,
    outOfOrderMs: 100,
    quarantineAfterErrors: 3,
  }));
});

afterAll(async () => {
  await service?.stop();
  await servers?.stop();
});

describe('the service end to end (real nats-server)', () => {
  it('answers health, readiness and metrics', async () => {
    expect((await fetch(`${service.url}/healthz`)).status).toBe(200);
    const ready = await fetch(`${service.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(((await ready.json()) as { workers: unknown[] }).workers).toHaveLength(2);
    const text = await (await fetch(`${service.url}/metrics`)).text();
    expect(text).toContain('vigil_worker_ready');
    expect(text).toContain('process_cpu_user_seconds_total');
    // Each worker's collector pauses, merged like the other worker metrics.
    expect(text).toContain('# TYPE vigil_gc_pause_seconds histogram');
  });

  it('judges events by the rule in force, and a change takes effect from its marker on', async () => {
    await control({
      op: 'upsert-rule',
      rule: {
        id: 'big',
        on: ['payment'],
        key: 'card',
        when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 100 }] },
        alert: { severity: 'high', title: 'big payment on {{card}}' },
      },
    });
    for (let i = 0; i < 20; i++)
      await event(`c${i}`, {
        type: 'payment',
        card: `c${i}`,
        amount: 80 + i * 2,
        id: `before-${i}`,
      });
    await control({
      op: 'upsert-rule',
      rule: {
        id: 'big',
        on: ['payment'],
        key: 'card',
        when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 90 }] },
        alert: { severity: 'high', title: 'big payment on {{card}}' },
      },
    });
    for (let i = 0; i < 20; i++)
      await event(`c${i}`, {
        type: 'payment',
        card: `c${i}`,
        amount: 80 + i * 2,
        id: `after-${i}`,
      });
    await drained(servers, service);
    await eventually(async () => (await alerts()).length === 9 + 14, 10_000, '23 alerts');
    const got = await alerts();
    const ids = (version: number) =>
      got
        .filter((a) => a.ruleVersion === version)
        .map((a) => a.events[0]?.id)
        .sort();
    // Version 1 (> 100): 102..118 of the first batch. Version 2 (> 90): 92..118 of the second.
    expect(ids(1)).toEqual(Array.from({ length: 9 }, (_, i) => `before-${i + 11}`).sort());
    expect(ids(2)).toEqual(Array.from({ length: 14 }, (_, i) => `after-${i + 6}`).sort());
    // Rule "big" has no pattern: each event its `when` accepted is an alert. The partitions
    // count matches per rule and hand them to the counter every 200 ms.
    const matches = async (): Promise<number> =>
      metricSum(await (await fetch(`${service.url}/metrics`)).text(), 'vigil_rule_matches_total', [
        'rule',
        'big',
      ]);
    await eventually(async () => (await matches()) >= 23, 10_000, '23 matches of rule big');
    await new Promise((r) => setTimeout(r, 500));
    expect(await matches()).toBe(23);
    expect(got.find((a) => a.events[0]?.id === 'after-19')).toMatchObject({
      severity: 'high',
      title: 'big payment on c19',
      key: 'c19',
      partition: partitionOf('c19', P),
    });
  });

  it('fires an absence rule on a quiet stream: idle partitions get time ticks', async () => {
    await control({
      op: 'upsert-rule',
      rule: {
        id: 'no-confirm',
        on: ['order'],
        key: 'order',
        pattern: { kind: 'absence', within: 300, expect: { on: ['confirm'] } },
      },
    });
    await event('o1', { type: 'order', order: 'o1', ts: Date.now() });
    await eventually(
      async () => (await alerts()).some((a) => a.ruleId === 'no-confirm'),
      10_000,
      'the absence alert',
    );
  });

  it('sends every kind of bad input to the DLQ with its reason, and keeps going', async () => {
    const wrongP = (partitionOf('k1', P) + 1) % P;
    await event('k1', { type: 'payment', ts: Date.now() });
    await servers.js.publish('events.k1', 'not json');
    await event('k1', { amount: 5 });
    await servers.js.publish(
      'events.k1',
      JSON.stringify({ type: 'payment', pad: 'x'.repeat(70_000) }),
    );
    await event('k1', { type: 'payment', ts: 1000 }); // far behind the watermark
    await servers.js.publish(`events.k1.${wrongP}`, JSON.stringify({ type: 'payment' }));
    await event('_secret', { type: 'payment' });
    await servers.js.publish(
      `events._vigil.${partitionOf('k1', P)}`,
      JSON.stringify({ vigil: 'epoch', controlSeq: 999_999 }),
    );
    await servers.js.publish(
      'vigil.control',
      JSON.stringify({ op: 'upsert-rule', rule: { id: 'broken', on: 'payment' } }),
    );
    await servers.js.publish('vigil.control', '{"op":');
    // A rule that fails at run time: `in` against a fact that is not a list. Three errors quarantine it.
    await control({
      op: 'upsert-rule',
      rule: {
        id: 'fragile',
        on: ['probe'],
        when: { all: [{ fact: 'a', operator: 'in', value: { fact: 'b' } }] },
      },
    });
    for (let i = 0; i < 3; i++) await event('f0', { type: 'probe', a: 1, b: 2, n: i }); // one key: errors are counted per worker
    await event('k1', { type: 'payment', card: 'k1', amount: 500, id: 'still-flowing' });
    await eventually(
      async () => (await alerts()).some((a) => a.events[0]?.id === 'still-flowing'),
      10_000,
      'a good event after the bad ones',
    );
    const expected = [
      'not-json',
      'missing-type',
      'too-large',
      'late',
      'wrong-partition',
      'reserved-key',
      'forged-marker',
      'invalid-control',
      'rule-error',
    ];
    let reasons = new Set<string>();
    await eventually(
      async () => {
        reasons = new Set((await deadLetters()).map((d) => d.reason));
        return expected.every((r) => reasons.has(r));
      },
      10_000,
      'a dead letter of every reason',
    ).catch((e: Error) => {
      throw new Error(`${e.message}; got ${[...reasons].join(', ')}`);
    });
    const dlq = await deadLetters();
    expect(
      dlq.find((d) => d.reason === 'invalid-control' && d.body.includes('broken'))?.error,
    ).toContain('/rule/on');
    expect(dlq.find((d) => d.reason === 'not-json')?.body).toBe('not json');
    // The quarantine is an ordinary, ordered control message.
    await eventually(
      async () =>
        (await readStream(servers, 'CONTROL')).some((m) =>
          new TextDecoder().decode(m.data).includes('"pause-rule","id":"fragile"'),
        ),
      10_000,
      'the quarantine',
    );
    // Counted once each, as stored: both workers report the two rejected control messages.
    const dlqCount = async (reason: string): Promise<number> =>
      metricSum(await (await fetch(`${service.url}/metrics`)).text(), 'vigil_dlq_total', [
        'reason',
        reason,
      ]);
    await eventually(async () => (await dlqCount('invalid-control')) >= 2, 5000, 'the count');
    await new Promise((r) => setTimeout(r, 500));
    expect(await dlqCount('invalid-control')).toBe(2);
    expect(await dlqCount('forged-marker')).toBe(1);
    // The first payment above has no "card", the key of rule "big": counted, not silent.
    await eventually(
      async () =>
        metricSum(
          await (await fetch(`${service.url}/metrics`)).text(),
          'vigil_rule_key_missing_total',
          ['rule', 'big'],
        ) >= 1,
      5000,
      'the missing key counted',
    );
    const text = await (await fetch(`${service.url}/metrics`)).text();
    expect(metricSum(text, 'vigil_quarantines_total', ['rule', 'fragile'])).toBeGreaterThanOrEqual(
      1,
    );
  });
});
