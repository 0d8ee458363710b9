import { afterEach, describe, expect, it, vi } from 'vitest';
import { partitionedEventSubject } from '../../protocol/index.js';
import {
  P,
  K1,
  K2,
  OTHER,
  upsert,
  every,
  big,
  fragile,
  settle,
  setup,
  outcomes,
  stopRunners,
} from './partition-runner-fixture.js';

afterEach(stopRunners);

describe('PartitionRunner: rules, markers and dead letters', () => {
  it('judges each event under the rules in force and hands its alerts over in log order', async () => {
    const t = await setup({ control: [upsert(every('every'))] });
    t.runner.start();
    t.source.marker(1);
    const e1 = t.source.event(K1, { type: 'pay', id: 'a', ts: 1000 });
    t.source.event(K2, { type: 'pay', id: 'b', ts: 1001 });
    t.source.event(K1, { type: 'refund', id: 'c', ts: 1002 });
    await t.source.drained();
    expect(t.fired()).toEqual(['every:a', 'every:b']);
    const a = t.alerts.published[0];
    expect(a).toMatchObject({ ruleId: 'every', key: K1, partition: P, title: 'every a', ts: 1000 });
    expect(a?.events).toEqual([{ seq: e1.seq, id: 'a', ts: 1000 }]);
    expect(t.runner.state.offset).toBe(t.source.lastSeq);
    expect(t.dead.published).toEqual([]);
    await t.runner.stop();
    expect(await outcomes(t.metrics)).toEqual({ judged: 3, marker: 1 });
  });

  it('switches rule sets exactly at each marker', async () => {
    const t = await setup({
      control: [upsert(every('every')), { op: 'delete-rule', id: 'every' }, upsert(big)],
    });
    t.runner.start();
    t.source.event(K1, { type: 'pay', id: 'before', ts: 1000 });
    t.source.marker(1);
    t.source.event(K1, { type: 'pay', id: 'one', amount: 500, ts: 1001 });
    t.source.marker(3); // markers name the accepted messages; 2 and 3 take effect together
    t.source.event(K1, { type: 'pay', id: 'small', amount: 5, ts: 1002 });
    t.source.event(K1, { type: 'pay', id: 'large', amount: 500, ts: 1003 });
    await t.source.drained();
    expect(t.fired()).toEqual(['every:one', 'big:large']);
    expect(t.applied).toEqual([
      [P, 1],
      [P, 3],
    ]);
    // Stored in CONTROL at 1000 (ms since the epoch): applied long after.
    expect(t.activation.every((ms) => ms !== undefined && ms > 0)).toBe(true);
    expect(t.runner.state.ruleSet.controlSeq).toBe(3);
  });

  it('waits at a marker until the worker has read its control message, and judges nothing after it meanwhile', async () => {
    const t = await setup({
      control: [upsert(every('every'))],
      unread: [upsert(every('late-rule'))],
    });
    t.runner.start();
    t.source.marker(1);
    t.source.marker(2);
    t.source.event(K1, { type: 'pay', id: 'after', ts: 1000 });
    await vi.waitFor(() => expect(t.applied).toEqual([[P, 1]]));
    await settle();
    expect(t.applied).toEqual([[P, 1]]);
    expect(t.alerts.published).toEqual([]);
    expect(t.dead.published).toEqual([]);
    t.stream.resume();
    await t.source.drained();
    expect(t.applied).toEqual([
      [P, 1],
      [P, 2],
    ]);
    expect(t.fired()).toEqual(['every:after', 'late-rule:after']);
  });

  it('dead-letters a marker that names a sequence CONTROL does not hold; a repeated marker changes nothing', async () => {
    const t = await setup({ control: [upsert(every('every'))] });
    t.runner.start();
    t.source.marker(1);
    t.source.marker(1);
    const forged = t.source.marker(9);
    t.source.event(K1, { type: 'pay', id: 'a', ts: 1000 });
    await t.source.drained();
    expect(t.applied).toEqual([[P, 1]]);
    expect(t.dead.published).toHaveLength(1);
    expect(t.dead.published[0]).toMatchObject({
      reason: 'forged-marker',
      id: `dlq-${forged.seq}-forged-marker`,
      source: { stream: 'EVENTS', subject: forged.subject, seq: forged.seq },
      data: forged.data,
    });
    expect(t.dead.published[0]?.message).toContain('control sequence 9');
    expect(t.fired()).toEqual(['every:a']);
    await t.runner.stop();
    expect(await outcomes(t.metrics)).toMatchObject({
      marker: 1,
      'marker-duplicate': 1,
      'forged-marker': 1,
    });
  });

  it('dead-letters a marker whose rule set this worker no longer holds', async () => {
    const t = await setup({ control: [upsert(every('a')), upsert(every('b'))] });
    t.control.release(2);
    t.runner.start();
    const m = t.source.marker(1);
    await t.source.drained();
    expect(t.dead.reasons()).toEqual(['bad-marker']);
    expect(t.dead.published[0]?.id).toBe(`dlq-${m.seq}-bad-marker`);
    expect(t.applied).toEqual([]);
    expect(t.runner.state.ruleSet.controlSeq).toBe(0);
  });

  it('dead-letters each bad record with its reason, its payload and a stable id, and goes on', async () => {
    const t = await setup({ control: [upsert(every('every'))] });
    t.runner.start();
    t.source.marker(1);
    const sent = [
      t.source.push(partitionedEventSubject(K1, P), '{oops', 1000),
      t.source.event(K1, { ts: 1000 }),
      t.source.event(OTHER, { type: 'pay', ts: 1000 }),
      t.source.event('_secret', { type: 'pay', ts: 1000 }),
      t.source.push(`events.${K1}.${P + 1}`, '{"type":"pay"}', 1000),
      t.source.push(`events._vigil.${P}`, '{"vigil":"epoch"}', 1000),
      t.source.push(`events._tick.${P}`, '{"vigil":"tick","ts":"soon"}', 1000),
    ];
    t.source.push(`events._probe.${P}`, '{"vigil":"probe"}', 1000);
    t.source.event(K1, { type: 'pay', id: 'good', ts: 1000 });
    await t.source.drained();
    expect(t.dead.reasons()).toEqual([
      'not-json',
      'missing-type',
      'wrong-partition',
      'reserved-key',
      'bad-subject',
      'bad-marker',
      'bad-tick',
    ]);
    t.dead.published.forEach((l, i) => {
      const r = sent[i];
      expect(l.id).toBe(`dlq-${r?.seq}-${l.reason}`);
      expect(l.data).toEqual(r?.data);
      expect(l.source).toEqual({ stream: 'EVENTS', subject: r?.subject, seq: r?.seq });
      expect(l.message.length).toBeGreaterThan(0);
    });
    expect(t.fired()).toEqual(['every:good']);
    await t.runner.stop();
    expect(await outcomes(t.metrics)).toMatchObject({ probe: 1, judged: 1, 'not-json': 1 });
  });

  it('reports a rule that fails on an event, and dead-letters the event for it', async () => {
    const t = await setup({ control: [upsert(fragile)] });
    t.runner.start();
    t.source.marker(1);
    const e = t.source.event(K1, { type: 'probe', a: 1, b: 2, ts: 1000 });
    await t.source.drained();
    expect(t.ruleErrors).toHaveLength(1);
    expect(t.ruleErrors[0]).toMatch(/^fragile@1 under 1: /);
    expect(t.dead.published).toHaveLength(1);
    expect(t.dead.published[0]).toMatchObject({
      reason: 'rule-error',
      ruleId: 'fragile',
      id: `dlq-${e.seq}-rule-error-fragile`,
      source: { stream: 'EVENTS', subject: e.subject, seq: e.seq },
      data: e.data,
    });
  });
});
