import { describe, expect, it, vi } from 'vitest';
import { classifyRecord, markerPayload, markerSubject } from '../../protocol/index.js';
import { MarkerWriter, type MarkerLog } from '../../service/control/marker-writer.js';

const PARTITIONS = 8;

/** `EVENTS` as the writer sees it: every publish it was asked for, and what the server stored. */
class FakeEvents implements MarkerLog {
  /** Every publish asked for, stored or not: `p:seq:msgID`. */
  readonly asked: string[] = [];
  /** The last message stored per subject. */
  readonly lastStored = new Map<string, Uint8Array>();
  /** Publishes still to fail. */
  failures = 0;
  /** While set, publishes wait for it. */
  hold: Promise<void> | undefined;
  /** What `last` does for a subject: a payload, or a failure to read it. */
  readonly lastOverride = new Map<string, Uint8Array | Error>();

  async publish(subject: string, data: Uint8Array, msgID: string): Promise<void> {
    const c = classifyRecord(subject, data, Number(subject.split('.')[2]), PARTITIONS);
    if (c.kind !== 'marker') throw new Error(`not a marker: ${subject}`);
    this.asked.push(`${subject.split('.')[2]}:${c.controlSeq}:${msgID}`);
    if (this.hold !== undefined) await this.hold;
    if (this.failures > 0) {
      this.failures--;
      throw Object.assign(new Error('timeout'), { name: 'TimeoutError' });
    }
    this.lastStored.set(subject, data);
  }

  async last(subject: string): Promise<Uint8Array | undefined> {
    const o = this.lastOverride.get(subject);
    if (o instanceof Error) throw o;
    return o ?? this.lastStored.get(subject);
  }

  /** The control sequences of the publishes asked for partition `p`, in order. */
  seqsOf(p: number): number[] {
    return this.asked.filter((a) => a.startsWith(`${p}:`)).map((a) => Number(a.split(':')[1]));
  }
}

function writer(events = new FakeEvents()) {
  const logged: string[] = [];
  const w = new MarkerWriter(events, (level, message) => logged.push(`${level}: ${message}`));
  return { w, events, logged };
}

const settle = () => new Promise((r) => setTimeout(r, 5));

describe('MarkerWriter', () => {
  it('writes one marker per partition written for, for each accepted sequence, with its dedupe id', async () => {
    const { w, events } = writer();
    await w.add(0, () => true);
    await w.add(3, () => true);
    await w.accept(1);
    await w.accept(2);
    expect(events.asked).toEqual([
      '0:1:epoch-1-0',
      '3:1:epoch-1-3',
      '0:2:epoch-2-0',
      '3:2:epoch-2-3',
    ]);
    expect(events.lastStored.get(markerSubject(3))).toEqual(markerPayload(2));
  });

  it('catches a partition up from the last marker in its log, and writes every accepted one when that cannot be read', async () => {
    const { w, events } = writer();
    for (const seq of [1, 2, 3]) await w.accept(seq);
    expect(events.asked).toEqual([]); // no partition yet
    events.lastOverride.set(markerSubject(5), markerPayload(2));
    events.lastOverride.set(markerSubject(6), new TextEncoder().encode('{not json'));
    events.lastOverride.set(markerSubject(7), new Error('no responders'));
    await w.add(5, () => true);
    await w.add(6, () => true);
    await w.add(7, () => true);
    await w.add(4, () => true); // no marker in its log
    expect(events.seqsOf(5)).toEqual([3]);
    expect(events.seqsOf(6)).toEqual([1, 2, 3]);
    expect(events.seqsOf(7)).toEqual([1, 2, 3]);
    expect(events.seqsOf(4)).toEqual([1, 2, 3]);
  });

  it('does not write for a partition no longer owned when its catch-up begins, nor after it is removed', async () => {
    const { w, events } = writer();
    await w.accept(1);
    await w.add(2, () => false);
    await w.add(1, () => true);
    w.remove(1);
    await w.accept(2);
    expect(events.asked).toEqual(['1:1:epoch-1-1']);
  });

  it('retries a marker that was not stored, and writes each sequence at most once', async () => {
    const { w, events, logged } = writer();
    await w.add(0, () => true);
    events.failures = 2;
    await w.accept(1);
    expect(events.asked).toEqual(['0:1:epoch-1-0', '0:1:epoch-1-0', '0:1:epoch-1-0']);
    expect(events.lastStored.get(markerSubject(0))).toEqual(markerPayload(1));
    expect(logged).toEqual([
      'warn: marker 1 for partition 0 not stored, retrying: timeout',
      'warn: marker 1 for partition 0 not stored, retrying: timeout',
    ]);
    // The same sequence again (a second accept, a catch-up of the same partition): nothing more.
    await w.accept(1);
    await w.add(0, () => true);
    expect(events.seqsOf(0)).toEqual([1, 1, 1]);
  });

  it('stops retrying a partition once it is removed', async () => {
    const { w, events } = writer();
    await w.add(0, () => true);
    await w.add(1, () => true);
    events.failures = 1_000;
    const accepted = w.accept(1);
    await new Promise((r) => setTimeout(r, 150));
    w.remove(0);
    w.remove(1);
    await accepted;
    const tries = events.asked.length;
    expect(tries).toBeGreaterThanOrEqual(2);
    await new Promise((r) => setTimeout(r, 250));
    expect(events.asked.length).toBe(tries);
  });

  it('writes the markers of one partition in order: a sequence waits for the one before it', async () => {
    const { w, events } = writer();
    await w.add(0, () => true);
    let release = (): void => {};
    events.hold = new Promise((r) => (release = r));
    const first = w.accept(1);
    const second = w.accept(2);
    await vi.waitFor(() => expect(events.seqsOf(0)).toEqual([1]));
    await settle();
    expect(events.seqsOf(0)).toEqual([1]);
    events.hold = undefined;
    release();
    await Promise.all([first, second]);
    expect(events.seqsOf(0)).toEqual([1, 2]);
  });
});
