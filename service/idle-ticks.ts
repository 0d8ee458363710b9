import type { JetStreamClient } from '@nats-io/jetstream';
import type { PartitionRunner } from './partition-runner.js';
import { tickSubject } from './subjects.js';

const encoder = new TextEncoder();

/**
 * Every `intervalMs`, publishes a tick marker into each partition that has read nothing for that
 * long while timers or buffered events wait for event time: on a quiet stream the watermark
 * moves on, so absence rules fire and the reorder buffer drains (DESIGN §3). Returns a stop function.
 */
export function startIdleTicks(opts: {
  readonly intervalMs: number;
  readonly js: JetStreamClient;
  /** The runners of the partitions this worker runs now (not the ones stopping). */
  readonly runners: () => Iterable<PartitionRunner>;
  readonly log: (level: 'warn', message: string) => void;
}): () => void {
  if (opts.intervalMs <= 0) return () => {};
  const timer = setInterval(() => {
    for (const r of opts.runners()) {
      if (r.idleMs < opts.intervalMs || !r.waitingForTime) continue;
      const p = r.state.partition;
      opts.js
        .publish(tickSubject(p), encoder.encode(JSON.stringify({ vigil: 'tick', ts: Date.now() })))
        .catch((err: Error) => opts.log('warn', `tick for partition ${p} failed: ${err.message}`));
    }
  }, opts.intervalMs);
  return () => clearInterval(timer);
}
