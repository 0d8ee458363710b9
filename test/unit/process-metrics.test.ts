import { AggregatorRegistry, Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import {
  ProcessMetrics,
  stateKey,
  type ProcessMetricSources,
} from '../../service/metrics/process-metrics.js';
import type { WorkerPool } from '../../service/threads/worker-pool.js';

/** What ProcessMetrics uses of a pool: its status, and merging registries (no workers here). */
function fakePool(
  status: { worker: number; partitions: number[]; restarts: number; recycles?: number }[],
  spaces: string[] = [],
): WorkerPool {
  return {
    status: () => status,
    keySpaces: () => spaces,
    metrics: async (extra: Registry[] = []) =>
      AggregatorRegistry.aggregate(await Promise.all(extra.map((r) => r.getMetricsAsJSON()))),
  } as unknown as WorkerPool;
}

const sample = (text: string, series: string): number | undefined => {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

describe('process metrics', () => {
  it('reads the CONTROL head, the state sizes of the partitions held now (with their key spaces), and restarts', async () => {
    const status = [
      { worker: 0, partitions: [0, 2], restarts: 0, recycles: 1 },
      { worker: 1, partitions: [1], restarts: 2, recycles: 0 },
    ];
    const asked: string[][] = [];
    const sources: ProcessMetricSources = {
      controlHead: async () => 42,
      stateSizes: async (hashes) => {
        asked.push(hashes.map((h) => stateKey(h)));
        return hashes.map(({ partition: p, space }) => ({
          keys: p * 10 + (space === undefined ? 0 : 1),
          bytes: p * 100,
        }));
      },
    };
    const m = new ProcessMetrics(fakePool(status, ['beneficiary']), 100, sources);
    let text = await (await m.exposition()).metrics();
    expect(sample(text, 'vigil_control_seq_head')).toBe(42);
    expect(sample(text, 'vigil_state_keys{partition="2"}')).toBe(20);
    expect(sample(text, 'vigil_state_bytes{partition="1"}')).toBe(100);
    // A key space's partition held with partition 2 (its state is in a hash of its own).
    expect(sample(text, 'vigil_state_keys{partition="2~beneficiary"}')).toBe(21);
    expect(sample(text, 'vigil_worker_restarts_total{worker="1"}')).toBe(2);
    expect(sample(text, 'vigil_worker_restarts_total{worker="0"}')).toBe(0);
    expect(sample(text, 'vigil_worker_recycles_total{worker="0"}')).toBe(1);
    expect(sample(text, 'vigil_worker_recycles_total{worker="1"}')).toBe(0);
    // One lookup per scrape serves both state gauges.
    expect(asked).toEqual([
      ['p:0', 'r:beneficiary:0', 'p:2', 'r:beneficiary:2', 'p:1', 'r:beneficiary:1'].map(
        (k) => `vigil:${k}:state`,
      ),
    ]);

    // Partition 2 moved away, worker 1 restarted once more.
    status[0] = { worker: 0, partitions: [0], restarts: 0, recycles: 3 };
    status[1] = { worker: 1, partitions: [1], restarts: 3, recycles: 0 };
    text = await (await m.exposition()).metrics();
    expect(sample(text, 'vigil_state_keys{partition="2"}')).toBeUndefined();
    expect(sample(text, 'vigil_state_keys{partition="2~beneficiary"}')).toBeUndefined();
    expect(sample(text, 'vigil_state_bytes{partition="2"}')).toBeUndefined();
    expect(sample(text, 'vigil_worker_restarts_total{worker="1"}')).toBe(3);
    expect(sample(text, 'vigil_worker_recycles_total{worker="0"}')).toBe(3);
  });

  it('a source that fails or hangs keeps the last values and does not hold up the scrape', async () => {
    let mode: 'ok' | 'fail' | 'hang' = 'ok';
    const answer = <T>(value: T): Promise<T> =>
      mode === 'ok'
        ? Promise.resolve(value)
        : mode === 'fail'
          ? Promise.reject(new Error('Redis away'))
          : new Promise<T>(() => {});
    const m = new ProcessMetrics(fakePool([{ worker: 0, partitions: [0], restarts: 0 }]), 100, {
      controlHead: () => answer(7),
      stateSizes: () => answer([{ keys: 3, bytes: 300 }]),
    });
    await m.exposition();
    for (const next of ['fail', 'hang'] as const) {
      mode = next;
      const started = Date.now();
      const text = await (await m.exposition()).metrics();
      expect(Date.now() - started).toBeLessThan(4000);
      expect(sample(text, 'vigil_control_seq_head')).toBe(7);
      expect(sample(text, 'vigil_state_keys{partition="0"}')).toBe(3);
      expect(sample(text, 'vigil_state_bytes{partition="0"}')).toBe(300);
    }
  });

  it('caps the rule label of the whole exposition', async () => {
    const m = new ProcessMetrics(fakePool([]), 1, {});
    const worker = new Registry();
    const alerts = new Counter({
      name: 'vigil_alerts_total',
      help: 'h',
      labelNames: ['rule'],
      registers: [worker],
    });
    alerts.inc({ rule: 'a' }, 1);
    alerts.inc({ rule: 'b' }, 2);
    alerts.inc({ rule: 'c' }, 3);
    const text = await (await m.exposition([worker])).metrics();
    expect(sample(text, 'vigil_alerts_total{rule="a"}')).toBe(1);
    expect(sample(text, 'vigil_alerts_total{rule="_other"}')).toBe(5);
  });
});
