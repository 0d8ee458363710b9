import fc from 'fast-check';
import { AggregatorRegistry, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { RecordHistogram } from '../../service/metrics/record-histogram.js';

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
// Values on and around the bounds, and past the last one.
const value = fc.oneof(
  fc.constantFrom(0, ...BUCKETS, 10.0001, 1e6),
  fc.double({ min: 0, max: 20, noNaN: true }),
);

function pair(): { ours: RecordHistogram; theirs: Histogram; a: Registry; b: Registry } {
  const a = new Registry();
  const b = new Registry();
  const ours = new RecordHistogram('x_seconds', 'help text', BUCKETS, a);
  const theirs = new Histogram({
    name: 'x_seconds',
    help: 'help text',
    buckets: BUCKETS,
    registers: [b],
  });
  return { ours, theirs, a, b };
}

describe('RecordHistogram', () => {
  it('exposes what prom-client’s Histogram exposes for the same values, alone and merged across threads', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(value, { maxLength: 200 }),
        fc.array(value, { maxLength: 50 }),
        async (xs, ys) => {
          const one = pair();
          const two = pair();
          for (const x of xs) {
            one.ours.observe(x);
            one.theirs.observe(x);
          }
          for (const y of ys) {
            two.ours.observe(y);
            two.theirs.observe(y);
          }
          expect(await one.a.metrics()).toBe(await one.b.metrics());
          // Worker threads' metrics are merged by the main thread from their JSON.
          const ours = AggregatorRegistry.aggregate([
            await one.a.getMetricsAsJSON(),
            await two.a.getMetricsAsJSON(),
          ]);
          const theirs = AggregatorRegistry.aggregate([
            await one.b.getMetricsAsJSON(),
            await two.b.getMetricsAsJSON(),
          ]);
          expect(await ours.metrics()).toBe(await theirs.metrics());
        },
      ),
      { numRuns: 200 },
    );
  });

  it('starts again from zero on reset', async () => {
    const { ours, theirs, a, b } = pair();
    ours.observe(0.3);
    theirs.observe(0.3);
    a.resetMetrics();
    b.resetMetrics();
    ours.observe(0.002);
    theirs.observe(0.002);
    expect(await a.metrics()).toBe(await b.metrics());
  });
});
