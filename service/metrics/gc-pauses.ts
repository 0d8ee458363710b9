import { constants, PerformanceObserver } from 'node:perf_hooks';

/** Kinds of garbage-collection pause, named as prom-client's `nodejs_gc_duration_seconds` names them. */
export const GcKind = {
  /** Young generation only (scavenge): frequent, its length grows with what survives. */
  minor: 'minor',
  /** Whole heap (mark-compact): its final, stop-the-world part; the marking before it runs in steps. */
  major: 'major',
  /** Incremental marking, as V8 reports it to Node (not each of its many small steps). */
  incremental: 'incremental',
  /** Weak-reference callbacks after a collection. */
  weakcb: 'weakcb',
} as const;
/** One of {@link GcKind}'s values. */
export type GcKind = (typeof GcKind)[keyof typeof GcKind];

/** One pause of a thread's garbage collector. */
export interface GcPause {
  readonly kind: GcKind;
  readonly ms: number;
  /** When it began, ms since the epoch (the clock of `Date.now()`). */
  readonly at: number;
}

/**
 * Pauses at least this long are reported by a worker to the main thread ({@link GcPauseLog}):
 * a shorter one is a tenth of the activation target or less, and a worker under load scavenges
 * about once a second: the short ones would only be noise.
 */
export const GC_REPORT_MS = 10;

function kindOf(k: unknown): GcKind | undefined {
  switch (k) {
    case constants.NODE_PERFORMANCE_GC_MINOR:
      return GcKind.minor;
    case constants.NODE_PERFORMANCE_GC_MAJOR:
      return GcKind.major;
    case constants.NODE_PERFORMANCE_GC_INCREMENTAL:
      return GcKind.incremental;
    case constants.NODE_PERFORMANCE_GC_WEAKCB:
      return GcKind.weakcb;
    default:
      return undefined;
  }
}

/**
 * Calls `onPause` for every garbage-collection pause of the calling thread (a worker thread sees
 * its own heap's). Why: a worker that stops for a collection judges no event and applies no
 * marker meanwhile, so a rule activation that is slow on one worker's partitions only is often
 * its collector's; the metrics and `bench:e2e` show it instead of leaving it to be guessed. Node
 * delivers the entries a turn of the event loop after the pause. Returns a function that stops
 * watching.
 */
export function watchGcPauses(onPause: (pause: GcPause) => void): () => void {
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = kindOf((e as { detail?: { kind?: unknown } }).detail?.kind);
      if (kind === undefined) continue;
      // From the monotonic clock back to the wall clock now: `timeOrigin` is fixed at start-up,
      // and the wall clock may have been corrected since.
      onPause({ kind, ms: e.duration, at: Date.now() - (performance.now() - e.startTime) });
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  return () => observer.disconnect();
}

/**
 * The recent long pauses of each worker thread (at least {@link GC_REPORT_MS}), as the workers
 * report them: read by the main thread to explain a slow activation. Bounded per worker, so a
 * worker that pauses often does not push out another's history.
 */
export class GcPauseLog {
  private readonly byWorker = new Map<number, GcPause[]>();

  /**
   * @param keep pauses kept per worker: at a few long pauses a second under load, 256 cover the
   * last minute or more, as long as `bench:e2e` runs its rule changes.
   */
  constructor(private readonly keep = 256) {}

  /** A pause of `worker`, reported by it. */
  record(worker: number, pause: GcPause): void {
    let pauses = this.byWorker.get(worker);
    if (pauses === undefined) this.byWorker.set(worker, (pauses = []));
    pauses.push(pause);
    if (pauses.length > this.keep) pauses.splice(0, pauses.length - this.keep);
  }

  /** Pauses of `worker` that overlap `[from, to]` (ms since the epoch), oldest first. */
  between(worker: number, from: number, to: number): GcPause[] {
    return (this.byWorker.get(worker) ?? []).filter((p) => p.at <= to && p.at + p.ms >= from);
  }
}
