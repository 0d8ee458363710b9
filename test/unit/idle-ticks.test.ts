import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { startIdleTicks, type TickedPartition } from '../../service/ingest/idle-ticks.js';

const INTERVAL = 1000;
const decoder = new TextDecoder();

/** A partition as ticks see it: how long it has been idle, whether it wants a tick, whether it is caught up. */
class FakePartition implements TickedPartition {
  readonly state: { readonly partition: number };
  idleMs = 10 * INTERVAL;
  due = true;
  /** What `caughtUp` answers: at once, or when the test resolves it. */
  answer: boolean | Promise<boolean> = true;
  caughtUpCalls = 0;

  constructor(partition: number) {
    this.state = { partition };
  }

  wantsTick(): boolean {
    return this.due;
  }

  tickTime(now: number): number {
    return now - 500;
  }

  caughtUp(): Promise<boolean> {
    this.caughtUpCalls++;
    return Promise.resolve(this.answer);
  }
}

class FakeJs {
  readonly ticks: { subject: string; payload: unknown }[] = [];
  fail: Error | undefined;
  hold: Promise<void> | undefined;

  async publish(subject: string, data: Uint8Array): Promise<unknown> {
    if (this.hold !== undefined) await this.hold;
    if (this.fail !== undefined) throw this.fail;
    this.ticks.push({ subject, payload: JSON.parse(decoder.decode(data)) });
    return {};
  }
}

function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve = (_: T): void => {};
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('idle ticks', () => {
  let stop = (): void => {};
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'Date'] });
    vi.setSystemTime(1_700_000_000_000);
  });
  afterEach(() => {
    stop();
    vi.useRealTimers();
  });

  function start(partitions: FakePartition[], intervalMs = INTERVAL) {
    const js = new FakeJs();
    const logged: string[] = [];
    stop = startIdleTicks({
      intervalMs,
      js,
      runners: () => partitions,
      log: (_, m) => logged.push(m),
    });
    return { js, logged };
  }

  it('ticks only a partition that has been idle an interval, has something due and is caught up, at its tick time', async () => {
    const [ready, nothingDue, behind, busy] = [0, 1, 2, 3].map((p) => new FakePartition(p)) as [
      FakePartition,
      FakePartition,
      FakePartition,
      FakePartition,
    ];
    nothingDue.due = false;
    behind.answer = false;
    busy.idleMs = INTERVAL - 1;
    const { js } = start([ready, nothingDue, behind, busy]);
    await vi.advanceTimersByTimeAsync(INTERVAL);
    expect(js.ticks).toEqual([
      { subject: 'events._tick.0', payload: { vigil: 'tick', ts: Date.now() - 500 } },
    ]);
    // The server is asked only for partitions that are idle and want a tick.
    expect([ready, nothingDue, behind, busy].map((p) => p.caughtUpCalls)).toEqual([1, 0, 1, 0]);
    await vi.advanceTimersByTimeAsync(INTERVAL);
    expect(js.ticks.map((t) => t.subject)).toEqual(['events._tick.0', 'events._tick.0']);
  });

  it('has one check or tick in flight per partition at a time', async () => {
    const p = new FakePartition(0);
    const answer = deferred<boolean>();
    p.answer = answer.promise;
    const { js } = start([p]);
    await vi.advanceTimersByTimeAsync(3 * INTERVAL);
    expect(p.caughtUpCalls).toBe(1);
    // Caught up; its tick is on its way and held: still no second check.
    const published = deferred<void>();
    js.hold = published.promise;
    answer.resolve(true);
    await vi.advanceTimersByTimeAsync(2 * INTERVAL);
    expect(p.caughtUpCalls).toBe(1);
    js.hold = undefined;
    published.resolve();
    await vi.advanceTimersByTimeAsync(0);
    expect(js.ticks).toHaveLength(1);
    p.answer = true;
    await vi.advanceTimersByTimeAsync(INTERVAL);
    expect(p.caughtUpCalls).toBe(2);
    expect(js.ticks).toHaveLength(2);
  });

  it('logs failed ticks once per run of failures, and when they are written again', async () => {
    const p = new FakePartition(4);
    const { js, logged } = start([p]);
    js.fail = new Error('no responders');
    await vi.advanceTimersByTimeAsync(3 * INTERVAL);
    expect(p.caughtUpCalls).toBe(3);
    expect(logged).toEqual(['tick for partition 4 failed: no responders']);
    js.fail = undefined;
    await vi.advanceTimersByTimeAsync(INTERVAL);
    expect(js.ticks).toHaveLength(1);
    expect(logged).toEqual([
      'tick for partition 4 failed: no responders',
      'ticks are written again (3 failed before)',
    ]);
  });

  it('writes no tick when ticks are off, nor after it is stopped', async () => {
    const p = new FakePartition(0);
    const off = start([p], 0);
    await vi.advanceTimersByTimeAsync(5 * INTERVAL);
    expect(off.js.ticks).toEqual([]);
    const on = start([p]);
    stop();
    await vi.advanceTimersByTimeAsync(5 * INTERVAL);
    expect(on.js.ticks).toEqual([]);
    expect(p.caughtUpCalls).toBe(0);
  });
});
