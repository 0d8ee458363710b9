import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Alert } from '../../rules/index.js';
import type { RunningService } from '../../service/index.js';
import { partitionOf } from '../../protocol/index.js';
import {
  activated,
  eventually,
  metricSum,
  readStream,
  startTestServers,
  startTestService,
  type TestServers,
} from './servers.js';

/**
 * The re-keying hop in the service: events partitioned by payer, a rule counting payments to one
 * beneficiary. With the hop on, the rule sees the payments of every payer, wherever each payer's
 * partition runs; rules keyed by the partition key stay in their partition.
 */
const P = 4;
let servers: TestServers;
let service: RunningService;
const decoder = new TextDecoder();

async function control(m: unknown): Promise<number> {
  const { seq } = await servers.js.publish('vigil.control', JSON.stringify(m));
  await activated(service, seq, P);
  return seq;
}

async function alerts(rule: string): Promise<Alert[]> {
  return (await readStream(servers, 'ALERTS'))
    .map((m) => JSON.parse(decoder.decode(m.data)) as Alert)
    .filter((a) => a.ruleId === rule);
}

/** Payers on every partition. */
const payers = Array.from({ length: 4 * P }, (_, i) => `payer${i}`);

beforeAll(async () => {
  servers = await startTestServers({ partitions: P });
  ({ service } = await startTestService(servers, {
    partitions: P,
    workers: 2,
    outOfOrderMs: 0,
    tickIntervalMs: 100,
    rekey: 'on',
    partitionKey: 'payer',
    rekeyReportMs: 50,
  }));
  await control({
    op: 'replace-all',
    rules: [
      {
        id: 'mule',
        on: ['payment'],
        key: 'beneficiary',
        pattern: {
          kind: 'threshold',
          aggregate: 'count',
          window: 60_000,
          operator: '>=',
          value: 8,
        },
        alert: { title: 'many payers to {{beneficiary}}', suppressFor: 60_000 },
      },
      {
        id: 'payer-burst',
        on: ['payment'],
        key: 'payer',
        pattern: {
          kind: 'threshold',
          aggregate: 'count',
          window: 60_000,
          operator: '>=',
          value: 3,
        },
        alert: { suppressFor: 60_000 },
      },
    ],
  });
});

afterAll(async () => {
  await service?.stop();
  await servers?.stop();
});

describe('re-keying hop (real nats-server)', () => {
  it("counts a beneficiary's payments from payers on every partition, once", async () => {
    expect(new Set(payers.map((p) => partitionOf(p, P))).size).toBe(P);
    const t0 = Date.now();
    // Eight payers on all partitions pay b1 once each; two pay twice more (their own burst).
    for (const [i, payer] of payers.slice(0, 8).entries())
      await servers.js.publish(
        `events.${payer}`,
        JSON.stringify({ type: 'payment', payer, beneficiary: 'b1', amount: 5, ts: t0 + i }),
      );
    for (const payer of payers.slice(0, 2))
      for (let k = 1; k <= 2; k++)
        await servers.js.publish(
          `events.${payer}`,
          JSON.stringify({ type: 'payment', payer, beneficiary: `other-${k}`, ts: t0 + 10 + k }),
        );
    let mule: Alert[] = [];
    await eventually(
      async () => (mule = await alerts('mule')).length > 0,
      20_000,
      'the mule alert',
    );
    expect(mule).toHaveLength(1);
    expect(mule[0]?.key).toBe('b1');
    expect(mule[0]?.title).toBe('many payers to b1');
    expect(mule[0]?.events.map((e) => e.ts)).toEqual([t0 + 7]);
    let burst: Alert[] = [];
    await eventually(
      async () => (burst = await alerts('payer-burst')).length >= 2,
      20_000,
      'the payer bursts',
    );
    expect(burst.map((a) => a.key).sort()).toEqual(payers.slice(0, 2).sort());
    // The hop carried the payments and the partitions' reports.
    const text = await (await fetch(`${service.url}/metrics`)).text();
    expect(metricSum(text, 'vigil_hop_sent_total')).toBeGreaterThanOrEqual(12);
    // Nothing went to the dead letters.
    expect(await readStream(servers, 'DLQ')).toEqual([]);
  });
});
