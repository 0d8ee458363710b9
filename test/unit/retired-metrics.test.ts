import { AggregatorRegistry, Counter, Gauge, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { RetiredMetrics } from '../../service/threads/retired-metrics.js';

/** A worker's exposition: `events` records read, `ready` as its gauge. */
async function exposition(events: number, ready: number): Promise<unknown> {
  const registry = new Registry();
  new Counter({ name: 'events_total', help: 'h', registers: [registry] }).inc(events);
  new Gauge({ name: 'ready', help: 'h', registers: [registry] }).set(ready);
  return registry.getMetricsAsJSON();
}

async function totals(parts: unknown[]): Promise<string> {
  return AggregatorRegistry.aggregate(parts as object[]).metrics();
}

describe('RetiredMetrics: the counters of ended worker threads stay in the totals', () => {
  it('keeps the last counters of each ended thread, not its gauges, and folds them into one part', async () => {
    const retired = new RetiredMetrics();
    retired.seen(0, 1, await exposition(5, 1));
    retired.seen(0, 1, await exposition(7, 1)); // the newest one counts
    retired.retire(0);
    retired.seen(1, 2, await exposition(3, 1));
    retired.retire(1);
    retired.retire(1); // nothing seen since: nothing more kept
    const text = await totals([...(await retired.parts(new Set())), await exposition(2, 1)]);
    expect(text).toContain('events_total 12');
    expect(text).toContain('ready 1');
  });

  it('counts a thread that answered the scrape and then ended once, and folds older threads into one part', async () => {
    const retired = new RetiredMetrics();
    for (let thread = 1; thread <= 4; thread++) {
      retired.seen(0, thread, await exposition(10, 1));
      retired.retire(0);
    }
    // Thread 4 answered this scrape with its 10, then ended: its kept part is left out.
    const parts = await retired.parts(new Set([4]));
    expect(parts).toHaveLength(1); // threads 1-3, folded
    expect(await totals([...parts, await exposition(10, 1)])).toContain('events_total 40');
    // The next scrape has no answer from thread 4: its part counts.
    expect(await totals(await retired.parts(new Set()))).toContain('events_total 40');
  });

  it('keeps nothing of a thread still running', async () => {
    const retired = new RetiredMetrics();
    retired.seen(0, 1, await exposition(5, 1));
    expect(await retired.parts(new Set())).toEqual([]);
  });
});
