import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { stateArenaBytes, type PartitionState } from '../../rules/index.js';
import type { PartitionRunner } from './partition-runner.js';

/** States a worker's partitions must have let go of since the last collection to make another worth it. */
const EXPIRED_ENOUGH = 10_000;
const CHECK_MS = 1000;

type Gc = (options?: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;

/**
 * V8's garbage collection, which Node gives a thread only with `--expose-gc`: the flag is set
 * for the process (V8 flags are process-wide) and the function taken from a new context, where
 * V8 installs it once the flag is on. Asked for as a "last resort" collection, which also hands
 * freed pages and the young generation's spare room back to the system: a plain full collection
 * freed the heap but left the process's RSS where it was, and both together handed much of it
 * back (the probe is described in bench/README.md).
 */
function memoryReducingGc(): () => void {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as Gc;
  return () => {
    // In a worker thread, the last-resort collection alone freed nothing in a probe; after a
    // plain one it handed the memory back.
    gc();
    gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  };
}

/**
 * Collects a worker's heap once its partitions have gone quiet after expiry let go of much keyed
 * state. V8 collects when a thread allocates; a worker that has stopped reading allocates
 * nothing, so the state its partitions removed by event time (docs/rule-language.md, "State that
 * ends") would stay on its heap, and in the process's memory, until the next burst of events.
 * One full collection when every partition has read nothing for `idleMs`, and at least
 * {@link EXPIRED_ENOUGH} states have expired since the last one: the pause falls where no event
 * waits.
 *
 * The collection frees the heap but V8 keeps the room it grew (a young generation grown to its
 * limit stays committed): after a mass expiry a worker's heap was 164 MB committed for 8 MB used,
 * and only the thread's end handed it back. Keyed state lives mostly in typed arrays outside the
 * heap (`stateArenaBytes`), which grow and never shrink. So when the heap commits, and the arrays
 * hold, `recycleSlackBytes` more than they use after the collection, `recycle` is called (once):
 * the pool replaces the thread, its partitions restoring from their final checkpoints. Returns a
 * stop function.
 */
export function startIdleGc(opts: {
  readonly idleMs: number;
  /** The runners of the partitions this worker runs now. */
  readonly runners: () => Iterable<PartitionRunner>;
  readonly log: (level: 'info', message: string) => void;
  /** Committed but unused heap and state arrays (bytes) after the collection that asks for a new thread; 0: never. */
  readonly recycleSlackBytes: number;
  readonly recycle: (why: string) => void;
}): () => void {
  const gc = memoryReducingGc();
  /** Expired states counted at the last collection, by runner. */
  const counted = new WeakMap<PartitionRunner, number>();
  let recycling = false;
  const timer = setInterval(() => {
    let expired = 0;
    const runners = [...opts.runners()];
    for (const r of runners) {
      if (r.idleMs < opts.idleMs) return;
      const st = r.state;
      expired += expiredOf(st) - (counted.get(r) ?? 0);
    }
    if (expired < EXPIRED_ENOUGH) return;
    const t0 = performance.now();
    gc();
    for (const r of runners) counted.set(r, expiredOf(r.state));
    const h = getHeapStatistics();
    let arrays = 0;
    let arraysLive = 0;
    for (const r of runners) {
      const a = stateArenaBytes(r.state);
      arrays += a.total;
      arraysLive += a.live;
    }
    const held = `${mb(h.total_heap_size)} MB of heap committed for ${mb(h.used_heap_size)} MB used, ${mb(arrays)} MB of state arrays for ${mb(arraysLive)} MB of state`;
    opts.log(
      'info',
      `collected the heap after ${expired} expired states, the partitions idle (${(performance.now() - t0).toFixed(0)} ms): ${held}`,
    );
    const slack = h.total_heap_size - h.used_heap_size + arrays - arraysLive;
    if (opts.recycleSlackBytes > 0 && slack >= opts.recycleSlackBytes && !recycling) {
      recycling = true;
      opts.recycle(`after expiry it holds ${held}`);
    }
  }, CHECK_MS);
  timer.unref();
  return () => clearInterval(timer);
}

function mb(bytes: number): string {
  return (bytes / 1e6).toFixed(1);
}

function expiredOf(st: PartitionState): number {
  return st.expired.window + st.expired.suppression + st.expired.ttl;
}
