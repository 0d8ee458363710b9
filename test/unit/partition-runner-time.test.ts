import { afterEach, describe, expect, it, vi } from 'vitest';
import { DEFAULT_LIMITS, lateMessage } from '../../rules/index.js';
import {
  K1,
  K2,
  OTHER,
  upsert,
  every,
  burst,
  noShip,
  settle,
  setup,
  outcomes,
  stopRunners,
} from './partition-runner-fixture.js';

afterEach(stopRunners);

describe('PartitionRunner: event time, ticks, and what checkpoints rely on', () => {
  it('dead-letters a late event, judged by no rule', async () => {
    const t = await setup({ control: [upsert(every('every'))] });
    t.runner.start();
    t.source.marker(1);
    t.source.event(K1, { type: 'pay', id: 'on-time', ts: 10_000 });
    // Stored after the newest event, with a time more than outOfOrderMs (0) before it.
    const late = t.source.event(K2, { type: 'pay', id: 'late', ts: 5_000 }, 10_001);
    await t.source.drained();
    expect(t.fired()).toEqual(['every:on-time']);
    expect(t.dead.published).toEqual([
      {
        reason: 'late',
        data: late.data,
        message: lateMessage(5_000, 9_999),
        source: { stream: 'EVENTS', subject: late.subject, seq: late.seq },
        id: `dlq-${late.seq}-late`,
      },
    ]);
  });

  it('moves event time on with ticks: a timer fires, buffered events are released and state expires', async () => {
    const t = await setup({ control: [upsert(noShip), upsert(burst)], outOfOrderMs: 100 });
    t.runner.start();
    t.source.marker(2);
    t.source.event(K1, { type: 'order', id: 'o1', ts: 1000 });
    t.source.event(K2, { type: 'pay', id: 'p1', ts: 1000 });
    await t.source.drained();
    expect(t.runner.state.buffer.size).toBe(2);
    t.source.tick(2500);
    await t.source.drained();
    expect(t.fired()).toEqual(['no-ship:o1']);
    expect(t.runner.state.buffer.size).toBe(0);
    expect(t.runner.state.watermark).toBe(2500 - 100 - 1);
    expect(t.runner.state.states.size + t.runner.state.raw.size).toBe(1); // the window of K2
    // Past the window's end (10 s) and its expiry bucket: the state is gone.
    t.source.tick(20_000);
    await t.source.drained();
    expect(t.runner.state.states.size + t.runner.state.raw.size).toBe(0);
    expect(t.runner.state.expired.window).toBe(1);
    await t.runner.stop();
    expect(await outcomes(t.metrics)).toMatchObject({ tick: 2, judged: 2 });
  });

  it('refuses a tick far ahead of the time it was stored, and moves nothing', async () => {
    const t = await setup({ control: [upsert(noShip)] });
    t.runner.start();
    t.source.marker(1);
    t.source.event(K1, { type: 'order', id: 'o1', ts: 1000 });
    const tick = t.source.tick(1000 + DEFAULT_LIMITS.maxEventFutureMs + 2000, 2000);
    await t.source.drained();
    expect(t.dead.reasons()).toEqual(['bad-tick']);
    expect(t.dead.published[0]?.id).toBe(`dlq-${tick.seq}-bad-tick`);
    expect(t.runner.state.maxTs).toBe(1000);
    expect(t.alerts.published).toEqual([]);
  });

  it('wants a tick once the time a tick would carry releases something due', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(1_000_000);
    const t = await setup({ control: [upsert(burst)], outOfOrderMs: 1000 });
    expect(t.runner.tickTime(1_000_500)).toBe(1_000_500); // no event yet: the clock
    t.runner.start();
    t.source.marker(1);
    t.source.event(K1, { type: 'pay', id: 'p1', ts: 5000 });
    await t.source.drained();
    // Read at 1 000 000: a tick carries the event's time plus the time since.
    expect(t.runner.tickTime(1_000_250)).toBe(5250);
    // The buffered event at 5000 is released once the tick's watermark (time − 1000 − 1) reaches it.
    expect(t.runner.wantsTick(1_001_000)).toBe(false);
    expect(t.runner.wantsTick(1_001_001)).toBe(true);
    // Nothing buffered, no timer, no state: no tick wanted, however late.
    const empty = await setup({ control: [upsert(every('every'))] });
    expect(empty.runner.wantsTick(9_000_000)).toBe(false);
  });

  it('asks the source whether it is caught up with the last record handled, and is not while handling one', async () => {
    const t = await setup({ control: [upsert(every('every'))] });
    t.runner.start();
    t.source.marker(1);
    t.source.event(OTHER, { type: 'pay', ts: 1000 }); // a dead letter is handled too
    await t.source.drained();
    expect(await t.runner.caughtUp()).toBe(true);
    expect(t.source.caughtUpAsked).toEqual([t.source.lastSeq]);
    let release = (): void => {};
    t.alerts.hold = new Promise((r) => (release = r));
    t.source.event(K1, { type: 'pay', id: 'held', ts: 1000 });
    await vi.waitFor(() => expect(t.alerts.published).toHaveLength(1));
    expect(await t.runner.caughtUp()).toBe(false);
    expect(t.source.caughtUpAsked).toHaveLength(1);
    release();
    await t.source.drained();
    expect(await t.runner.caughtUp()).toBe(true);
  });

  it('runs a checkpoint between records: at once when idle, after the outputs of the record in flight otherwise', async () => {
    const t = await setup({ control: [upsert(every('every'))] });
    t.runner.start();
    t.source.marker(1);
    await t.source.drained();
    const seen: number[] = [];
    t.runner.atBoundary(() => seen.push(t.runner.state.offset));
    expect(seen).toEqual([1]);
    let release = (): void => {};
    t.alerts.hold = new Promise((r) => (release = r));
    const e = t.source.event(K1, { type: 'pay', id: 'a', ts: 1000 });
    t.source.event(K1, { type: 'pay', id: 'b', ts: 1001 });
    await vi.waitFor(() => expect(t.alerts.published).toHaveLength(1));
    t.runner.atBoundary(() => seen.push(t.runner.state.offset));
    expect(seen).toEqual([1]);
    t.alerts.hold = undefined;
    release();
    await t.source.drained();
    // It ran once the alert of the record in flight was handed over, before the next record.
    expect(seen).toEqual([1, e.seq]);
    expect(t.fired()).toEqual(['every:a', 'every:b']);
  });

  it('asks admission before each record, and waits while it is held back', async () => {
    const t = await setup({ control: [upsert(every('every'))] });
    let release = (): void => {};
    t.setAdmit(() => new Promise<void>((r) => (release = r)));
    t.runner.start();
    t.source.marker(1);
    t.source.event(K1, { type: 'pay', id: 'a', ts: 1000 });
    await vi.waitFor(() => expect(t.admitted()).toBe(1));
    await settle();
    expect(t.admitted()).toBe(1);
    expect(t.applied).toEqual([]);
    t.setAdmit(() => undefined);
    release();
    await t.source.drained();
    expect(t.admitted()).toBe(2);
    expect(t.fired()).toEqual(['every:a']);
  });

  it('stops after the record in flight: records not taken yet are not handled', async () => {
    const t = await setup({ control: [upsert(every('every'))] });
    t.runner.start();
    t.source.marker(1);
    let release = (): void => {};
    t.alerts.hold = new Promise((r) => (release = r));
    t.source.event(K1, { type: 'pay', id: 'a', ts: 1000 });
    t.source.event(K1, { type: 'pay', id: 'b', ts: 1001 });
    await vi.waitFor(() => expect(t.alerts.published).toHaveLength(1));
    let stopped = false;
    const stopping = t.runner.stop().then(() => (stopped = true));
    await settle();
    expect(stopped).toBe(false);
    release();
    await stopping;
    expect(t.fired()).toEqual(['every:a']);
    expect(t.source.ended).toBe(true);
  });
});
