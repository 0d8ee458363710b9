import { describe, expect, it } from 'vitest';
import {
  createPartition,
  DEFAULT_LIMITS,
  processRecord,
  type ProcessResult,
  type Rule,
} from '../../rules/index.js';
import { ruleSetOf, upsert } from './harness.js';

/** Feeds `events` (each with its `ts`) to one key of a partition holding at most 2 pending entries per key, then a tick past every deadline. */
function run(rule: Rule, events: { type: string; ts: number }[]): ProcessResult[] {
  const st = createPartition(ruleSetOf(upsert(rule)), {
    partition: 0,
    limits: { ...DEFAULT_LIMITS, maxPendingPerKey: 2 },
  });
  let seq = 0;
  const out = events.map((e) =>
    processRecord(st, {
      kind: 'event',
      seq: ++seq,
      key: 'k',
      data: JSON.stringify(e),
      publishTs: e.ts,
    }),
  );
  out.push(processRecord(st, { kind: 'tick', seq: ++seq, ts: 600_000 }));
  return out;
}

const dropped = (rs: ProcessResult[]) => rs.flatMap((r) => r.overflows);

describe('maxPendingPerKey: a key keeps its newest pending entries and reports the oldest dropped', () => {
  it('absence: the oldest waiting trigger is dropped, the newer ones still fire', () => {
    const rs = run(
      {
        id: 'unconfirmed',
        on: ['order'],
        pattern: { kind: 'absence', within: '10s', expect: { on: ['confirm'] } },
      },
      [
        { type: 'order', ts: 1000 },
        { type: 'order', ts: 2000 },
        { type: 'order', ts: 3000 },
      ],
    );
    const overflow = { ruleId: 'unconfirmed', key: 'k', dropped: 1, limit: 'maxPendingPerKey' };
    expect(dropped(rs)).toEqual([overflow]);
    expect(rs.flatMap((r) => r.alerts).map((a) => a.events.map((e) => e.seq))).toEqual([[2], [3]]);
  });

  it('sequence: the oldest partial match is dropped, the newer ones complete', () => {
    const rs = run(
      {
        id: 'a-then-b',
        on: ['a', 'b'],
        pattern: {
          kind: 'sequence',
          within: '1m',
          afterMatch: 'no-skip',
          steps: [
            { name: 'a', on: ['a'] },
            { name: 'b', on: ['b'] },
          ],
        },
      },
      [
        { type: 'a', ts: 1000 },
        { type: 'a', ts: 2000 },
        { type: 'a', ts: 3000 },
        { type: 'b', ts: 4000 },
      ],
    );
    const overflow = { ruleId: 'a-then-b', key: 'k', dropped: 1, limit: 'maxPendingPerKey' };
    expect(dropped(rs)).toEqual([overflow]);
    expect(rs.flatMap((r) => r.alerts).map((a) => a.events.map((e) => e.seq))).toEqual([
      [2, 4],
      [3, 4],
    ]);
  });
});
