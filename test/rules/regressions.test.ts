import { describe, expect, it } from 'vitest';
import {
  applyControl,
  checkpointParts,
  createPartition,
  DEFAULT_LIMITS,
  emptyRuleSet,
  parseEvent,
  processRecord,
  restorePartition,
  restorePartitionParts,
  snapshotPartition,
  validateControl,
} from '../../rules/index.js';
import { Feed, keyStates, ruleSetOf, upsert } from './harness.js';
import { keyStatesJSON } from '../../rules/key-state-json.js';
import { decodeField, encodeField } from '../../rules/checkpoint-field.js';
import { LineageIndex } from '../../rules/lineage-index.js';
import { StateList } from '../../rules/keyed-states.js';
import { slidingWindow } from '../../rules/cep/threshold.js';
import { WindowArena, type SmallWindow } from '../../rules/cep/small-window.js';

// Defects found in review, each kept as a test.
describe('review regressions', () => {
  it('a sliding sum is exact again once a large value has left the window', () => {
    const f = new Feed(
      ruleSetOf(
        upsert({
          id: 's',
          on: ['p'],
          pattern: {
            kind: 'threshold',
            aggregate: 'sum',
            field: 'v',
            window: 10,
            operator: '>=',
            value: 0,
          },
        }),
      ),
    );
    f.event({ type: 'p', v: 1e16, ts: 0 });
    for (const [ts, v] of [
      [20, 1],
      [21, 1],
      [22, 0],
    ] as const)
      f.event({ type: 'p', v, ts });
    f.tick(100);
    expect(f.alerts.map((a) => a.values.sum)).toEqual([1e16, 1, 2, 2]);
  });

  it('a tumbling distinct counts numbers too', () => {
    const f = new Feed(
      ruleSetOf(
        upsert({
          id: 'd',
          on: ['p'],
          pattern: {
            kind: 'threshold',
            aggregate: 'distinct',
            field: 'card',
            window: 100,
            windowType: 'tumbling',
            operator: '>=',
            value: 3,
          },
        }),
      ),
    );
    for (const card of [1, 2, 3]) f.event({ type: 'p', card, ts: 10 });
    f.tick(1000);
    expect(f.alerts.map((a) => a.values.distinct)).toEqual([3]);
  });

  it('a tumbling window closed under suppressFor survives snapshot and restore', () => {
    const rs = ruleSetOf(
      upsert({
        id: 't',
        on: ['p'],
        pattern: {
          kind: 'threshold',
          aggregate: 'count',
          window: 100,
          windowType: 'tumbling',
          operator: '>=',
          value: 1,
        },
        alert: { suppressFor: 1000 },
      }),
    );
    const st = createPartition(rs, { partition: 0 });
    processRecord(st, {
      kind: 'event',
      seq: 1,
      key: 'k',
      data: '{"type":"p","ts":10}',
      publishTs: 10,
    });
    processRecord(st, { kind: 'tick', seq: 2, ts: 200 });
    const back = restorePartition(snapshotPartition(st), () => rs, {});
    expect(() =>
      processRecord(back, {
        kind: 'event',
        seq: 3,
        key: 'k',
        data: '{"type":"p","ts":250}',
        publishTs: 250,
      }),
    ).not.toThrow();
  });

  it('alerts of the same rule, key and window in two partitions have different ids', () => {
    const rs = ruleSetOf(
      upsert({
        id: 't',
        on: ['p'],
        key: 'b',
        pattern: {
          kind: 'threshold',
          aggregate: 'count',
          window: 100,
          windowType: 'tumbling',
          operator: '>=',
          value: 1,
        },
      }),
    );
    const ids = [1, 2].map((partition) => {
      const st = createPartition(rs, { partition });
      processRecord(st, {
        kind: 'event',
        seq: partition,
        key: `k${partition}`,
        data: '{"type":"p","b":"x","ts":10}',
        publishTs: 10,
      });
      return processRecord(st, { kind: 'tick', seq: 10, ts: 500 }).alerts[0]?.id;
    });
    expect(ids[0]).toBeDefined();
    expect(ids[0]).not.toBe(ids[1]);
  });

  it('absence triggers that came due while the rule was paused are dropped, not fired later', () => {
    const v1 = ruleSetOf(
      upsert({
        id: 'a',
        on: ['o'],
        pattern: { kind: 'absence', within: 100, expect: { on: ['c'] } },
      }),
    );
    const v2 = applyControl(v1, { op: 'pause-rule', id: 'a' }, 2).ruleSet;
    const v3 = applyControl(v2, { op: 'resume-rule', id: 'a' }, 3).ruleSet;
    const f = new Feed(v1);
    f.event({ type: 'o', ts: 0 });
    f.marker(v2);
    f.tick(500); // the deadline (100) passes while paused
    f.marker(v3);
    f.event({ type: 'o', ts: 600 });
    f.tick(1000);
    expect(f.fired).toEqual(['a@700']);
  });

  it('keeps one absence timer per key, however many triggers wait', () => {
    const f = new Feed(
      ruleSetOf(
        upsert({
          id: 'a',
          on: ['o'],
          pattern: { kind: 'absence', within: '1d', expect: { on: ['c'] } },
        }),
      ),
    );
    for (let i = 0; i < 100; i++) f.event({ type: 'o', ts: i });
    f.tick(200);
    expect(f.state.timers.size).toBe(1);
  });

  it('refuses events that are too deep, hold non-finite numbers, have a zone-less time, or come from too far ahead', () => {
    const parse = (s: string) => parseEvent(s, 1_000_000, DEFAULT_LIMITS);
    expect(parse(`{"type":"p","x":${'['.repeat(40)}${']'.repeat(40)}}`)).toMatchObject({
      ok: false,
      reason: 'too-deep',
    });
    expect(parse('{"type":"p","amount":1e400}')).toMatchObject({ ok: false, reason: 'bad-number' });
    expect(parse('{"type":"p","ts":"2024-01-01T00:00:00"}')).toMatchObject({
      ok: false,
      reason: 'bad-ts',
    });
    expect(parse('{"type":"p","ts":"Jan 1 2024"}')).toMatchObject({ ok: false, reason: 'bad-ts' });
    expect(
      parseEvent(
        '{"type":"p","ts":"2024-01-01T01:00:00+01:00"}',
        Date.UTC(2024, 0, 1),
        DEFAULT_LIMITS,
      ),
    ).toMatchObject({ ok: true, ts: Date.UTC(2024, 0, 1) });
    expect(parse('{"type":"p","ts":8640000000000000}')).toMatchObject({
      ok: false,
      reason: 'bad-ts',
    });
  });

  it('refuses unknown pattern, alert and expect settings, dead steps, and oversized matches', () => {
    const problems = validateControl(emptyRuleSet(), {
      op: 'changeset',
      changes: [
        upsert({
          id: 'a',
          on: ['p'],
          pattern: {
            kind: 'threshold',
            aggregate: 'count',
            window: 10,
            windowtype: 'tumbling',
            operator: '>',
            value: 1,
          },
          alert: { supressFor: '1m' },
        } as never),
        upsert({
          id: 'b',
          on: ['o'],
          pattern: { kind: 'absence', within: 10, expect: { on: ['c'], whn: {} } },
        } as never),
        upsert({
          id: 'c',
          on: ['p'],
          pattern: {
            kind: 'sequence',
            within: 10,
            steps: [
              { name: 'x', on: ['q'] },
              { name: 'y', times: 1000 },
            ],
          },
        } as never),
      ],
    });
    expect(problems.map((p) => p.pointer)).toEqual([
      '/changes/0/rule/pattern/windowtype',
      '/changes/0/rule/alert/supressFor',
      '/changes/1/rule/pattern/expect/whn',
      '/changes/2/rule/pattern/steps/0/on',
      '/changes/2/rule/pattern/steps',
    ]);
  });

  it('a rule set does not change when the caller mutates the message it applied', () => {
    const rule = {
      id: 'r',
      on: ['p'],
      when: { all: [{ fact: 'a', operator: 'in', value: ['x'] }] },
    };
    const rs = ruleSetOf(upsert(rule as never));
    rule.when.all[0]!.value.push('y');
    const f = new Feed(rs);
    f.event({ type: 'p', a: 'y', ts: 1 });
    expect(f.alerts).toEqual([]);
  });

  // Found in review of checkpoint format v3 (buffered events with their record key, hits recomputed).
  const counting = (id: string, on: string, when?: unknown) =>
    ({
      id,
      on: [on],
      ...(when === undefined ? {} : { when }),
      pattern: { kind: 'threshold', aggregate: 'count', window: 1000, operator: '>=', value: 1 },
    }) as never;

  it('an event given as an object keeps the verdicts made at arrival through a checkpoint', () => {
    const rs = ruleSetOf(
      upsert(
        counting('hot', 'reading', { all: [{ fact: 'temp', operator: 'greaterThan', value: 5 }] }),
      ),
    );
    // JSON cannot carry this value: recomputing from the stored copy would judge it otherwise.
    const data = { type: 'reading', temp: { toString: () => '7' } };
    const live = createPartition(rs, { partition: 0, outOfOrderMs: 50 });
    processRecord(live, { kind: 'event', seq: 1, key: 'k', publishTs: 100, data });
    const parts = checkpointParts(live, true);
    const restored = restorePartitionParts(
      {
        meta: parts.meta,
        buffered: parts.buffered,
        fields: parts.upserts,
        lineages: parts.lineages,
      },
      () => rs,
      { outOfOrderMs: 50 },
    );
    const tick = { kind: 'tick', seq: 2, ts: 500 } as const;
    expect(processRecord(restored, tick).alerts.length).toBe(1);
    expect(processRecord(live, tick).alerts.length).toBe(1);
  });

  it('a text event with a lone surrogate is stored escaped, so it survives a UTF-8 store', () => {
    const rs = ruleSetOf(
      upsert(counting('r', 'x', { all: [{ fact: 's', operator: 'equal', value: '\ud800' }] })),
    );
    const live = createPartition(rs, { partition: 0, outOfOrderMs: 50 });
    processRecord(live, {
      kind: 'event',
      seq: 1,
      key: 'k',
      publishTs: 100,
      data: '{"type":"x","s":"\ud800"}',
    });
    const parts = checkpointParts(live, true);
    // Redis stores the chunk of buffered events as UTF-8.
    expect(parts.buffered.length).toBe(1);
    const viaRedis = parts.buffered.map(([f, v]): [string, string] => [
      f,
      Buffer.from(v, 'utf8').toString('utf8'),
    ]);
    const restored = restorePartitionParts(
      { meta: parts.meta, buffered: viaRedis, fields: parts.upserts, lineages: parts.lineages },
      () => rs,
      { outOfOrderMs: 50 },
    );
    expect(processRecord(restored, { kind: 'tick', seq: 2, ts: 500 }).alerts.length).toBe(1);
  });

  it('a mutable window far below zero before small windows is stored exactly (the base is checked against them)', () => {
    const arena = new WindowArena();
    const mutable = slidingWindow([-(2 ** 52) - 1], [], false, 0, [0]);
    const states = new StateList([
      ['a@1', undefined, mutable],
      ['b@1', undefined, arena.make([2 ** 52], [], false, 0)],
    ]);
    const index = new LineageIndex();
    const text = encodeField(states, index, arena);
    const back = decodeField('k', text, arena, (n) => index.nameOf(n));
    expect(JSON.stringify(keyStatesJSON(back, arena))).toBe(
      JSON.stringify(keyStatesJSON(states, arena)),
    );
  });

  it('window timestamps more than 2^53 apart are stored exactly (no offsets from a base)', () => {
    // Two windows of one key that far apart cannot live in one partition any more (the older
    // expires first), but a field must still write any key exactly: the key's states are put
    // together from two partitions.
    const rs = ruleSetOf({ op: 'replace-all', rules: [counting('ra', 'a'), counting('rb', 'b')] });
    const windowOf = (type: string, ts: number) => {
      const st = createPartition(rs, { partition: 0 });
      processRecord(st, {
        kind: 'event',
        seq: 1,
        key: 'k',
        publishTs: ts,
        data: `{"type":"${type}"}`,
      });
      processRecord(st, { kind: 'tick', seq: 2, ts: ts + 3 });
      if (st.states.keyNumber('k') < 0) throw new Error(`no state for ${type}`);
      return st;
    };
    // Each partition's small windows are its own: copied into one arena.
    const arena = new WindowArena();
    const both = new StateList();
    for (const part of [windowOf('a', -(2 ** 52) - 1), windowOf('b', 2 ** 52 + 2)])
      keyStates(part, 'k').forEach((sid, sup, op) => {
        const w = op as SmallWindow;
        const ws = part.windows;
        both.add(sid, sup, arena.make(ws.times(w), ws.values(w), ws.sums(w), ws.front(w)));
      });
    expect(both.size).toBe(2);
    const index = new LineageIndex();
    const text = encodeField(both, index, arena);
    const back = decodeField('k', text, arena, (n) => index.nameOf(n));
    expect(JSON.stringify(keyStatesJSON(back, arena))).toBe(
      JSON.stringify(keyStatesJSON(both, arena)),
    );
  });
});
