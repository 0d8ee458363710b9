import { constants, PerformanceObserver } from 'node:perf_hooks';

/** Kinds of garbage-collection pause, as Node reports them. */
export const GcKind = {
  /** Young generation (scavenge). */
  minor: 'minor',
  /** Whole heap (mark-compact): its final, stop-the-world part. */
  major: 'major',
  incremental: 'incremental',
  weakCallbacks: 'weak-callbacks',
} as const;
export type GcKind = (typeof GcKind)[keyof typeof GcKind];

/** One pause of a thread's garbage collector. */
export interface GcPause {
  readonly kind: GcKind;
  readonly ms: number;
  /** When it began, ms since the epoch. */
  readonly at: number;
}

function kindOf(k: unknown): GcKind {
  if (k === constants.NODE_PERFORMANCE_GC_MAJOR) return GcKind.major;
  if (k === constants.NODE_PERFORMANCE_GC_INCREMENTAL) return GcKind.incremental;
  if (k === constants.NODE_PERFORMANCE_GC_WEAKCB) return GcKind.weakCallbacks;
  return GcKind.minor;
}

/**
 * Calls `onPause` for every garbage-collection pause of the calling thread (a worker thread sees
 * its own heap's). Why: a worker that stops for a collection applies no marker meanwhile, so a
 * slow rule activation on one worker's partitions is often its collector's, and the metrics and
 * `bench:e2e` say so instead of leaving it to be guessed. Returns a function that stops watching.
 */
export function watchGcPauses(onPause: (pause: GcPause) => void): () => void {
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      onPause({
        kind: kindOf((e as { detail?: { kind?: unknown } }).detail?.kind),
        ms: e.duration,
        at: performance.timeOrigin + e.startTime,
      });
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  return () => observer.disconnect();
}

/** Pauses at least this long are reported by a worker to the main thread ({@link GcPauseLog}). */
export const GC_REPORT_MS = 10;

/**
 * The recent long pauses of each worker thread (at least {@link GC_REPORT_MS}), as the workers
 * report them: read by the main thread to explain a slow activation.
 */
export class GcPauseLog {
  private readonly pauses: { worker: number; pause: GcPause }[] = [];

  constructor(private readonly keep = 1024) {}

  record(worker: number, pause: GcPause): void {
    this.pauses.push({ worker, pause });
    if (this.pauses.length > this.keep) this.pauses.splice(0, this.pauses.length - this.keep);
  }

  /** Pauses of `worker` that overlap `[from, to]` (ms since the epoch), oldest first. */
  between(worker: number, from: number, to: number): GcPause[] {
    return this.pauses
      .filter((x) => x.worker === worker && x.pause.at <= to && x.pause.at + x.pause.ms >= from)
      .map((x) => x.pause);
  }
}
