import { DiscardPolicy } from '@nats-io/jetstream';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Alert } from '../../rules/index.js';
import type { RunningService } from '../../service/index.js';
import { partitionOf } from '../../protocol/index.js';
import {
  eventually,
  metricSum,
  readStream,
  startTestServers,
  startTestService,
  type TestServers,
  publishControl,
  readAlerts,
} from './servers.js';

/**
 * The re-keying hop in the service: events partitioned by payer, a rule counting payments to one
 * beneficiary. With the hop on, the rule sees the payments of every payer, wherever each payer's
 * partition runs; rules keyed by the partition key stay in their partition.
 */
const P = 4;
let servers: TestServers;
let service: RunningService;

const control = (m: unknown): Promise<number> => publishControl(servers, service, P, m);

async function alerts(rule: string): Promise<Alert[]> {
  return (await readAlerts(servers)).filter((a) => a.ruleId === rule);
}

/** Payers on every partition. */
const payers = Array.from({ length: 4 * P }, (_, i) => `payer${i}`);

beforeAll(async () => {
  servers = await startTestServers({ partitions: P, redis: true });
  ({ service } = await startTestService(servers, {
    partitions: P,
    workers: 2,
    // With the hop on, idle partitions get ticks (their reports): event time moves at the clock's
    // pace there, and a payment stamped before the test published it must not be late.
    outOfOrderMs: 1000,
    tickIntervalMs: 100,
    rekey: 'on',
    partitionKey: 'payer',
    rekeyReportMs: 50,
    checkpointIntervalMs: 200,
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
      30_000,
      'the mule alert',
    ).catch(async (e: Error) => {
      // What each side of the hop had done, to tell a stalled source from a stalled key space.
      const lines = (await (await fetch(`${service.url}/metrics`)).text())
        .split('\n')
        .filter((l) =>
          /^vigil_(events_total|hop_sent_total|partition_offset|watermark_lag_seconds)\{/.test(l),
        );
      throw new Error(`${e.message}\n${lines.join('\n')}`);
    });
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

  it('refuses messages in REKEY that no partition of Vigil sent, and goes on', async () => {
    const before = (await readStream(servers, 'DLQ')).length;
    await servers.js.publish('rekey.beneficiary.0', '{"type":"payment"}');
    await servers.js.publish('rekey.beneficiary.0', 'R 99 1 1 5 5');
    let reasons: string[] = [];
    await eventually(
      async () => {
        reasons = (await readStream(servers, 'DLQ'))
          .slice(before)
          .map((m) => m.headers['Vigil-Reason'] ?? '');
        return reasons.length >= 2;
      },
      20_000,
      'two dead letters',
    );
    expect(reasons).toEqual(['bad-forward', 'bad-forward']);
  });

  it("holds a partition's checkpoint while REKEY refuses what it sends, and loses nothing when it takes them again", async () => {
    const redis = new Redis(servers.redis?.url as string);
    try {
      const info = await servers.jsm.streams.info('REKEY');
      // REKEY full, refusing new messages: every forward and report fails until it takes them.
      await servers.jsm.streams.update('REKEY', {
        ...info.config,
        max_msgs: info.state.messages,
        discard: DiscardPolicy.New,
      });
      const t0 = Date.now();
      const seqs = new Map<number, number>();
      for (const [i, payer] of payers.slice(0, 8).entries()) {
        const ack = await servers.js.publish(
          `events.${payer}`,
          JSON.stringify({ type: 'payment', payer, beneficiary: 'b2', ts: t0 + i }),
        );
        const p = partitionOf(payer, P);
        seqs.set(p, Math.max(seqs.get(p) ?? 0, ack.seq));
      }
      // Several checkpoint intervals: a partition's checkpoint stays before the payments it could not send on.
      await new Promise((r) => setTimeout(r, 1500));
      for (const [p, seq] of seqs) {
        const offset = Number((await redis.hget(`vigil:p:${p}`, 'offset')) ?? 0);
        expect(offset, `partition ${p}`).toBeLessThan(seq);
      }
      expect((await alerts('mule')).filter((a) => a.key === 'b2')).toEqual([]);
      await servers.jsm.streams.update('REKEY', {
        ...info.config,
        max_msgs: -1,
        discard: DiscardPolicy.Old,
      });
      let b2: Alert[] = [];
      await eventually(
        async () => (b2 = (await alerts('mule')).filter((a) => a.key === 'b2')).length > 0,
        20_000,
        'the mule alert for b2',
      );
      expect(b2).toHaveLength(1);
      for (const [p, seq] of seqs)
        await eventually(
          async () => Number((await redis.hget(`vigil:p:${p}`, 'offset')) ?? 0) >= seq,
          10_000,
          `partition ${p}'s checkpoint past its payments`,
        );
    } finally {
      redis.disconnect();
    }
  });
});
