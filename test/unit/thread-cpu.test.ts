import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { registerThreadCpu, threadCpuSeconds } from '../../service/metrics/thread-cpu.js';

function spin(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe('a thread’s own CPU time (Linux /proc/thread-self)', () => {
  it('grows with the work this thread does', () => {
    const before = threadCpuSeconds();
    expect(before).toBeTypeOf('number');
    spin(300);
    const after = threadCpuSeconds() as number;
    // 300 ms of spinning at 10 ms resolution; a shared machine may give the thread less of it.
    expect(after - (before as number)).toBeGreaterThanOrEqual(0.05);
    expect(after - (before as number)).toBeLessThan(5);
  });

  it('is exposed as vigil_worker_cpu_seconds_total of the worker, counting from the thread’s start', async () => {
    const registry = new Registry();
    registerThreadCpu(registry, '3');
    spin(100);
    const t1 = threadCpuSeconds() as number;
    const line = (await registry.getSingleMetricAsString('vigil_worker_cpu_seconds_total'))
      .split('\n')
      .find((l) => l.startsWith('vigil_worker_cpu_seconds_total{worker="3"}'));
    const t2 = threadCpuSeconds() as number;
    const value = Number(line?.split(' ')[1]);
    // All of the thread's time, not just since the counter was made.
    expect(value).toBeGreaterThanOrEqual(t1);
    expect(value).toBeLessThanOrEqual(t2);
  });
});
