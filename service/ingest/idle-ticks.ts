import type { PartitionRunner } from '../threads/partition-runner.js';
import { tickPayload, tickSubject } from '../../protocol/index.js';

/** What ticks need of a partition's {@link PartitionRunner}. */
export type TickedPartition = Pick<
  PartitionRunner,
  'idleMs' | 'caughtUp' | 'tickTime' | 'wantsTick'
> & { readonly state: { readonly partition: number } };

/**
 * Every `intervalMs`, publishes a tick into each partition that has read nothing for that long,
 * where a tick would release something (a buffered event, a timer, a key due to expire:
 * `PartitionRunner.wantsTick`), and that is caught up with its log (asked of the server): on a
 * quiet stream the watermark moves on, so absence rules fire, windows close and state expires.
 * A partition that is behind (a stalled consumer, a slow server) gets no tick: its reader's
 * silence says nothing about the log. The tick's time is taken after the server said the
 * partition was caught up (`PartitionRunner.tickTime`: the newest event's time plus the time
 * since it was read); the rules core moves event time no further than the time the log stored
 * the tick. Returns a stop function.
 */
export function startIdleTicks(opts: {
  readonly intervalMs: number;
  /** Where ticks are published (a `JetStreamClient`). */
  readonly js: { publish(subject: string, data: Uint8Array): Promise<unknown> };
  /** The runners of the partitions this worker runs now (not the ones stopping). */
  readonly runners: () => Iterable<TickedPartition>;
  readonly log: (level: 'warn', message: string) => void;
}): () => void {
  if (opts.intervalMs <= 0) return () => {};
  /** Partitions whose check or tick is on its way: one at a time each. */
  const busy = new Set<number>();
  /** Failures since the last success: logged once per run of them, not on every interval. */
  let failing = 0;
  const tick = async (r: TickedPartition): Promise<void> => {
    const p = r.state.partition;
    busy.add(p);
    try {
      if (!(await r.caughtUp())) return;
      const data = tickPayload(r.tickTime(Date.now()));
      await opts.js.publish(tickSubject(p), data);
      if (failing > 0) opts.log('warn', `ticks are written again (${failing} failed before)`);
      failing = 0;
    } catch (err) {
      if (failing++ === 0)
        opts.log('warn', `tick for partition ${p} failed: ${(err as Error).message}`);
    } finally {
      busy.delete(p);
    }
  };
  const timer = setInterval(() => {
    for (const r of opts.runners())
      if (r.idleMs >= opts.intervalMs && !busy.has(r.state.partition) && r.wantsTick(Date.now()))
        void tick(r);
  }, opts.intervalMs);
  return () => clearInterval(timer);
}
