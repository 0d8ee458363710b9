import { AggregatorRegistry, Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import {
  ProcessMetrics,
  type ProcessMetricSources,
} from '../../service/metrics/process-metrics.js';
import type { WorkerPool } from '../../service/threads/worker-pool.js';

/** What ProcessMetrics uses of a pool: its status, and merging registries (no workers here). */
function fakePool(
  status: { worker: number; partitions: number[]; restarts: number; recycles?: number }[],
): WorkerPool {
  return {
    status: () => status,
    metrics: async (extra: Registry[] = []) =>
      AggregatorRegistry.aggregate(await Promise.all(extra.map((r) => r.getMetricsAsJSON()))),
  } as unknown as WorkerPool;
}

const sample = (text: string, series: string): number | undefined => {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

describe('process metrics', () => {
  it('reads the CONTROL head, the state sizes of the partitions held now, and restarts', async () => {
    const status = [
      { worker: 0, partitions: [0, 2], restarts: 0, recycles: 1 },
      { worker: 1, partitions: [1], restarts: 2, recycles: 0 },
    ];
    const asked: number[][] = [];
    const sources: ProcessMetricSources = {
      controlHead: async () => 42,
      stateSizes: async (ps) => {
        asked.push([...ps]);
        return ps.map((p) => ({ keys: p * 10, bytes: p * 100 }));
      },
    };
    const m = new ProcessMetrics(fakePool(status), 100, sources);
    let text = await (await m.exposition()).metrics();
    expect(sample(text, 'vigil_control_seq_head')).toBe(42);
    expect(sample(text, 'vigil_state_keys{partition="2"}')).toBe(20);
    expect(sample(text, 'vigil_state_bytes{partition="1"}')).toBe(100);
    expect(sample(text, 'vigil_worker_restarts_total{worker="1"}')).toBe(2);
    expect(sample(text, 'vigil_worker_restarts_total{worker="0"}')).toBe(0);
    expect(sample(text, 'vigil_worker_recycles_total{worker="0"}')).toBe(1);
    expect(sample(text, 'vigil_worker_recycles_total{worker="1"}')).toBe(0);
    // One lookup per scrape serves both state gauges.
    expect(asked).toEqual([[0, 2, 1]]);

    // Partition 2 moved away, worker 1 restarted once more.
    status[0] = { worker: 0, partitions: [0], restarts: 0, recycles: 3 };
    status[1] = { worker: 1, partitions: [1], restarts: 3, recycles: 0 };
    text = await (await m.exposition()).metrics();
    expect(sample(text, 'vigil_state_keys{partition="2"}')).toBeUndefined();
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
