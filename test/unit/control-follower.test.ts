import { describe, expect, it, vi } from 'vitest';
import { ControlFollower, type ControlEvent } from '../../jetstream/index.js';
import { foldVersions } from '../../protocol/index.js';
import { DEFAULT_LIMITS, type RuleSet } from '../../rules/index.js';
import { MemoryControlStream } from './memory-control-stream.js';

const encoder = new TextEncoder();

const rule = (id: string, type = 'pay') => ({
  op: 'upsert-rule',
  rule: {
    id,
    on: [type],
    when: { all: [{ fact: 'type', operator: 'equal', value: type }] },
    alert: { severity: 'low', title: id },
  },
});

/** A rule set as the tests compare them: its sequence and its rules with their versions. */
const shape = (rs: RuleSet | undefined) =>
  rs && {
    controlSeq: rs.controlSeq,
    rules: [...rs.rules.values()].map((r) => [r.id, r.version, r.paused]),
  };

/** Resolves on the next turns of the event loop: what a follower reads meanwhile is read. */
const settle = () => new Promise((r) => setTimeout(r, 5));

function follower(stream: MemoryControlStream, onMessage?: (e: ControlEvent) => Promise<void>) {
  const events: ControlEvent[] = [];
  const f = new ControlFollower(stream, DEFAULT_LIMITS, async (e) => {
    events.push(e);
    await onMessage?.(e);
  });
  return { f, events };
}

describe('ControlFollower', () => {
  it('folds CONTROL into one rule set per sequence, as every shard does, rejections included', async () => {
    const stream = new MemoryControlStream();
    const messages = [
      rule('a'),
      encoder.encode('not json'),
      { op: 'upsert-rule', rule: { id: 'bad', on: [] } },
      rule('b', 'refund'),
      { op: 'pause-rule', id: 'a' },
      { op: 'delete-rule', id: 'b' },
    ];
    const at = [1000, 2000, 3000, 4000, 5000, 6000];
    messages.forEach((m, i) => stream.append(m, at[i]));
    const { f, events } = follower(stream);
    await f.start();
    expect(f.ready).toBe(true);
    expect(f.seq).toBe(6);
    const reference = foldVersions(
      messages.map((m, i) => ({
        seq: i + 1,
        data: m instanceof Uint8Array ? m : encoder.encode(JSON.stringify(m)),
      })),
      DEFAULT_LIMITS,
    );
    for (let seq = 0; seq <= 6; seq++)
      expect(shape(f.ruleSetAt(seq)), `seq ${seq}`).toEqual(shape(reference.get(seq)));
    // A rejected message advances the sequence and changes nothing else.
    expect(shape(f.ruleSetAt(2))).toEqual({ controlSeq: 2, rules: [['a', 1, false]] });
    expect(shape(f.ruleSetAt(6))).toEqual({ controlSeq: 6, rules: [['a', 1, true]] });
    expect(events.map((e) => [e.seq, e.outcome.ok, e.committedAt])).toEqual([
      [1, true, 1000],
      [2, false, 2000],
      [3, false, 3000],
      [4, true, 4000],
      [5, true, 5000],
      [6, true, 6000],
    ]);
    expect(new TextDecoder().decode(events[1]?.data)).toBe('not json');
    expect(f.commitTime(4)).toBe(4000);
    await f.stop();
  });

  it('resolves start only once every message CONTROL held at start is applied', async () => {
    const stream = new MemoryControlStream();
    stream.append(rule('a'));
    stream.append(rule('b'));
    stream.pause();
    const { f } = follower(stream);
    let started = false;
    const starting = f.start().then(() => (started = true));
    await settle();
    expect(started).toBe(false);
    expect(f.ready).toBe(false);
    stream.resume();
    await starting;
    expect(f.ready).toBe(true);
    expect(f.seq).toBe(2);
    // Messages appended later are followed too.
    stream.append(rule('c'));
    await f.waitFor(3);
    expect(shape(f.ruleSetAt(3))?.rules.map((r) => r[0])).toEqual(['a', 'b', 'c']);
    await f.stop();
  });

  it('wakes a waiter for a sequence only after the handler of that message has finished', async () => {
    const stream = new MemoryControlStream();
    let release = (): void => {};
    const gate = new Promise<void>((r) => (release = r));
    const { f } = follower(stream, (e) => (e.seq === 2 ? gate : Promise.resolve()));
    await f.start();
    await f.waitFor(0); // at or before the current sequence: at once
    let woken = false;
    const waiting = f.waitFor(2).then(() => (woken = true));
    stream.append(rule('a'));
    stream.append(rule('b'));
    await vi.waitFor(() => expect(f.seq).toBe(2));
    await settle();
    // Folded, but its handler (the marker writes, in a worker) has not finished.
    expect(f.ruleSetAt(2)).toBeDefined();
    expect(woken).toBe(false);
    release();
    await waiting;
    expect(woken).toBe(true);
    await f.stop();
  });

  it('asks the stream for its head, and forgets rule sets and commit times before a released sequence', async () => {
    const stream = new MemoryControlStream();
    for (const id of ['a', 'b', 'c']) stream.append(rule(id), 100);
    const { f } = follower(stream);
    await f.start();
    stream.pause();
    stream.append(rule('d'));
    const asked = stream.headCalls;
    expect(await f.streamHead()).toBe(4);
    expect(stream.headCalls).toBe(asked + 1);
    expect(f.seq).toBe(3);
    f.release(2);
    expect(f.ruleSetAt(0)).toBeUndefined();
    expect(f.ruleSetAt(1)).toBeUndefined();
    expect(f.commitTime(1)).toBeUndefined();
    expect(f.ruleSetAt(2)?.controlSeq).toBe(2);
    expect(f.ruleSetAt(3)?.controlSeq).toBe(3);
    expect(f.commitTime(2)).toBe(100);
    await f.stop();
  });

  it('stops reading CONTROL on stop', async () => {
    const stream = new MemoryControlStream();
    stream.append(rule('a'));
    const { f, events } = follower(stream);
    await f.start();
    expect(stream.open).toBe(1);
    await f.stop();
    expect(stream.open).toBe(0);
    stream.append(rule('b'));
    await settle();
    expect(f.seq).toBe(1);
    expect(events).toHaveLength(1);
  });
});
