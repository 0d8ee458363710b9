import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { GcKind, GcPauseLog, watchGcPauses, type GcPause } from '../../service/index.js';

describe('watchGcPauses', () => {
  it('reports a full collection of this thread as a major pause, with its time', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const seen: GcPause[] = [];
    const stop = watchGcPauses((p) => seen.push(p));
    const before = Date.now();
    gc();
    // Performance entries are delivered after the current task.
    for (let i = 0; i < 50 && !seen.some((p) => p.kind === GcKind.major); i++)
      await new Promise((r) => setTimeout(r, 10));
    stop();
    const major = seen.find((p) => p.kind === GcKind.major);
    expect(major).toBeDefined();
    expect(major?.ms).toBeGreaterThan(0);
    expect(major?.at).toBeGreaterThanOrEqual(before - 5);
    expect(major?.at).toBeLessThanOrEqual(Date.now());
    // Stopped: another collection is not reported.
    const n = seen.length;
    gc();
    await new Promise((r) => setTimeout(r, 50));
    expect(seen.length).toBe(n);
  });
});

describe('GcPauseLog', () => {
  const pause = (at: number, ms: number, kind: GcKind = GcKind.minor): GcPause => ({
    kind,
    ms,
    at,
  });

  it('answers the pauses of one worker that overlap a window', () => {
    const log = new GcPauseLog();
    log.record(0, pause(100, 20));
    log.record(1, pause(110, 60, GcKind.major));
    log.record(0, pause(200, 5));
    log.record(0, pause(300, 10));
    // [150, 250]: the pause ending at 120 is before it; the one of worker 1 is not worker 0's.
    expect(log.between(0, 150, 250)).toEqual([pause(200, 5)]);
    // A pause that began before the window and ended in it overlaps it.
    expect(log.between(1, 150, 250)).toEqual([pause(110, 60, GcKind.major)]);
    expect(log.between(0, 0, 1000)).toHaveLength(3);
    expect(log.between(2, 0, 1000)).toEqual([]);
  });

  it('keeps only the most recent pauses of each worker', () => {
    const log = new GcPauseLog(2);
    log.record(1, pause(50, 10));
    for (let i = 0; i < 5; i++) log.record(0, pause(i * 100, 10));
    expect(log.between(0, 0, 1000).map((p) => p.at)).toEqual([300, 400]);
    // Another worker's pauses do not push these out.
    expect(log.between(1, 0, 1000).map((p) => p.at)).toEqual([50]);
  });
});
