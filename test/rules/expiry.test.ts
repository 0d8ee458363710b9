import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  applyControl,
  createPartition,
  keyedStateCount,
  EXPIRY_BUCKET_MS,
  expiryBucket,
  keyExpiry,
  processRecord,
  restorePartitionParts,
  checkpointParts,
  snapshotPartition,
  withoutExpiry,
  type PartitionState,
  type RuleSet,
} from '../../rules/index.js';
import { decodeAllKeys } from '../../rules/keyed-access.js';
import { keyStatesJSON } from '../../rules/key-state-json.js';
import { StateList } from '../../rules/keyed-states.js';
import {
  allStates,
  expectWindowsOwned,
  Feed,
  keyStates,
  memoryStore,
  ruleSetOf,
  upsert,
  writeParts,
} from './harness.js';
import { outputs, step, toRecords, versions } from './random-logs.js';

/** Every (key, lineage) state as JSON, with a suppression time that can suppress nothing any more left out. */
function liveStates(st: PartitionState): Map<string, string> {
  decodeAllKeys(st);
  const out = new Map<string, string>();
  for (const key of st.states.keys())
    for (const [sid, sup, op] of keyStatesJSON(keyStates(st, key), st.windows)) {
      const rule = st.ruleSet.rules.get(sid.slice(0, sid.lastIndexOf('@')));
      const supLive =
        sup !== null && rule !== undefined && sup + rule.suppressForMs - 1 > st.watermark;
      out.set(`${key} ${sid}`, JSON.stringify([supLive ? sup : null, op]));
    }
  return out;
}

let ttlExpired = 0;
const sum = (st: PartitionState): number =>
  st.expired.window + st.expired.suppression + st.expired.ttl;

describe('keyed state ends by event time', () => {
  it('removes a sliding window once its newest entry has left the look-back, by the watermark alone', () => {
    const rs = ruleSetOf(
      upsert({
        id: 'w',
        on: ['p'],
        pattern: { kind: 'threshold', aggregate: 'count', window: 2000, operator: '>=', value: 99 },
      }),
    );
    const f = new Feed(rs);
    f.event({ type: 'p', ts: 10_000 }, 'a');
    f.event({ type: 'p', ts: 10_500 }, 'b');
    f.tick(10_501);
    expect(f.state.states.size).toBe(2);
    // a ends at 12,000 (looked at in the 12,000 bucket), b at 12,500 (the 13,000 bucket).
    f.tick(12_000);
    expect(f.state.states.size).toBe(2);
    f.tick(12_001);
    expect([...f.state.states.keys()]).toEqual(['b']);
    f.tick(13_001);
    expect(f.state.states.size).toBe(0);
    expect(f.state.expired).toEqual({ window: 2, suppression: 0, ttl: 0 });
  });

  it('keeps a suppression time exactly as long as it can suppress, and no longer', () => {
    const rs = ruleSetOf(
      upsert({
        id: 'big',
        on: ['p'],
        when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 10 }] },
        alert: { suppressFor: '5s' },
      }),
    );
    const f = new Feed(rs);
    f.event({ type: 'p', amount: 50, ts: 20_000 }, 'k');
    expect(f.alerts).toHaveLength(1);
    f.tick(24_999 + 1);
    expect(f.state.states.size).toBe(1);
    f.tick(25_001);
    expect(f.state.states.size).toBe(0);
    expect(f.state.expired).toEqual({ window: 0, suppression: 1, ttl: 0 });
    // And the next alert is not suppressed, as it would not have been.
    f.event({ type: 'p', amount: 50, ts: 25_002 }, 'k');
    expect(f.alerts).toHaveLength(2);
  });

  it('ends a suppression time that a compatible change made meaningless (suppressFor taken away)', () => {
    // Found in review: the time stayed, listed nowhere, for good.
    const rule = (alert: object) =>
      ({
        id: 'seq',
        on: ['a', 'b'],
        pattern: {
          kind: 'sequence',
          within: '10s',
          steps: [
            { name: 'a', on: ['a'] },
            { name: 'b', on: ['b'] },
          ],
        },
        alert,
      }) as never;
    const v1 = ruleSetOf(upsert(rule({ suppressFor: 500 })));
    const v2 = applyControl(v1, upsert(rule({})), 2).ruleSet;
    expect(v2.rules.get('seq')?.stateEpoch).toBe(v1.rules.get('seq')?.stateEpoch);
    const f = new Feed(v1);
    f.event({ type: 'a', ts: 100 }, 'k');
    f.event({ type: 'b', ts: 300 }, 'k'); // a match: an alert and a suppression time
    f.event({ type: 'a', ts: 400 }, 'k'); // a partial match until 10,400
    f.tick(1500);
    f.marker(v2);
    f.tick(1_000_000_000);
    expect(f.alerts).toHaveLength(1);
    expect(keyedStateCount(f.state)).toBe(0);
  });

  it('changes no outcome: the same alerts as a run that keeps everything, and it holds exactly the states that can still matter (random logs)', () => {
    const sets = versions();
    let expired = 0;
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 200, size: 'max' }), (steps) => {
        const records = toRecords(steps, sets);
        const options = { partition: 1, outOfOrderMs: 40 };
        const a = createPartition(sets[0] as RuleSet, options);
        const b = createPartition(sets[0] as RuleSet, options);
        const outA = records.map((r) => processRecord(a, r));
        const outB = withoutExpiry(() => records.map((r) => processRecord(b, r)));
        expect(outputs(outA)).toBe(outputs(outB));
        expectWindowsOwned(a);
        expectWindowsOwned(b);
        expired += sum(a);
        // Every state the expiring run holds, the other holds alike; every state only the other
        // holds can no longer change anything (its key's bucket has come).
        const live = liveStates(a);
        const kept = liveStates(b);
        for (const [id, json] of live) expect(kept.get(id)).toBe(json);
        decodeAllKeys(b);
        for (const { key, sid, sup, op } of allStates(b)) {
          if (live.has(`${key} ${sid}`)) continue;
          // A state only this run holds: its end's bucket has come.
          const exp = keyExpiry(b, new StateList([[sid, sup, op]]));
          expect(exp !== undefined && exp <= b.watermark).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
    expect(expired).toBeGreaterThan(100);
  });

  it.each([
    ['', undefined],
    [' (every rule with a stateTtl shorter than its window, within or suppressFor)', 120],
  ])(
    'expires the same states after a checkpoint and restore as without one, listing restored keys without decoding them%s',
    (_, stateTtl) => {
      const sets = versions(stateTtl);
      const bySeq = new Map(sets.map((rs) => [rs.controlSeq, rs]));
      fc.assert(
        fc.property(
          fc.array(step, { minLength: 1, maxLength: 200, size: 'max' }),
          fc.nat(),
          (steps, cutAt) => {
            const records = toRecords(steps, sets);
            const options = { partition: 1, outOfOrderMs: 40 };
            const whole = createPartition(sets[0] as RuleSet, options);
            const outWhole = records.map((r) => processRecord(whole, r));
            const cut = cutAt % (records.length + 1);
            const first = createPartition(sets[0] as RuleSet, options);
            const outFirst = records.slice(0, cut).map((r) => processRecord(first, r));
            const store = memoryStore('');
            writeParts(store, checkpointParts(first, true));
            const restored = restorePartitionParts(store, (seq) => bySeq.get(seq), options);
            // Nothing decoded yet, every key with an end of its own listed.
            expect(restored.states.size).toBe(0);
            const outRest = records.slice(cut).map((r) => processRecord(restored, r));
            expect(outputs([...outFirst, ...outRest])).toBe(outputs(outWhole));
            expect(new TextDecoder().decode(snapshotPartition(restored))).toBe(
              new TextDecoder().decode(snapshotPartition(whole)),
            );
            expectWindowsOwned(whole);
            expectWindowsOwned(restored);
            // What was expired after the cut is what the whole run expired after it.
            expect(sum(first) + sum(restored)).toBe(sum(whole));
            if (stateTtl !== undefined) ttlExpired += whole.expired.ttl;
          },
        ),
        { numRuns: 300 },
      );
      if (stateTtl !== undefined) expect(ttlExpired).toBeGreaterThan(100);
    },
  );

  it('rounds ends up to buckets of event time', () => {
    expect(EXPIRY_BUCKET_MS).toBe(1000);
    expect(expiryBucket(12_000)).toBe(12_000);
    expect(expiryBucket(12_001)).toBe(13_000);
  });
});

describe('stateTtl: a rule bounds how long it remembers a key it has not heard of', () => {
  const counting = (stateTtl?: string) =>
    upsert({
      id: 'logins',
      on: ['login'],
      pattern: { kind: 'threshold', aggregate: 'count', window: '1h', operator: '>=', value: 2 },
      ...(stateTtl === undefined ? {} : { stateTtl }),
    } as never);

  it('forgets a sliding window stateTtl after its newest event, though the window would keep it', () => {
    const run = (stateTtl?: string) => {
      const f = new Feed(ruleSetOf(counting(stateTtl)));
      f.event({ type: 'login', ts: 10_000 }, 'a');
      f.tick(15_000);
      const kept = f.state.states.size;
      f.tick(15_001);
      f.event({ type: 'login', ts: 16_000 }, 'a');
      f.tick(16_001);
      return { kept, alerts: f.alerts.length, expired: f.state.expired };
    };
    // Without it, the second login within the hour alerts.
    expect(run()).toEqual({ kept: 1, alerts: 1, expired: { window: 0, suppression: 0, ttl: 0 } });
    // With it, the first login is forgotten at 15,000 (its end, rounded up to the second).
    expect(run('5s')).toEqual({
      kept: 1,
      alerts: 0,
      expired: { window: 0, suppression: 0, ttl: 1 },
    });
  });

  it('ends states that end by their timers too: an absence trigger, a partial sequence, an open tumbling window', () => {
    const rs = ruleSetOf({
      op: 'replace-all',
      rules: [
        {
          id: 'unpaid',
          on: ['order'],
          pattern: { kind: 'absence', within: '1h', expect: { on: ['paid'] } },
          stateTtl: '2s',
        },
        {
          id: 'two-step',
          on: ['a', 'b'],
          pattern: {
            kind: 'sequence',
            within: '1h',
            steps: [
              { name: 'a', on: ['a'] },
              { name: 'b', on: ['b'] },
            ],
          },
          stateTtl: '2s',
        },
        {
          id: 'hourly',
          on: ['a'],
          pattern: {
            kind: 'threshold',
            aggregate: 'count',
            window: '1h',
            windowType: 'tumbling',
            operator: '>=',
            value: 2,
          },
          stateTtl: '2s',
        },
      ],
    } as never);
    const f = new Feed(rs);
    f.event({ type: 'order', ts: 1000 }, 'k');
    f.event({ type: 'a', ts: 1000 }, 'k');
    f.tick(1001);
    expect(keyedStateCount(f.state)).toBe(3);
    f.tick(3001);
    expect(keyedStateCount(f.state)).toBe(0);
    expect(f.state.expired.ttl).toBe(3);
    // Nothing of them is left to fire or to match: no alert at the absence deadline, and a "b"
    // no longer completes the sequence, nor a second "a" the hour's count.
    f.event({ type: 'b', ts: 4000 }, 'k');
    f.event({ type: 'a', ts: 4000 }, 'k');
    f.tick(4_000_000);
    expect(f.alerts).toEqual([]);
  });

  it('is checked like the other durations', () => {
    const o = applyControl(
      ruleSetOf({ op: 'replace-all', rules: [] }),
      {
        op: 'upsert-rule',
        rule: {
          id: 'x',
          on: ['a'],
          when: { all: [{ fact: 'n', operator: 'equal', value: 1 }] },
          stateTtl: 'soon',
        },
      } as never,
      2,
    );
    expect(!o.ok && o.problems.map((p) => [p.pointer, p.message])).toEqual([
      [
        '/rule/stateTtl',
        'stateTtl must be a duration such as "30s", "10m", "2h", "1d" or a number of milliseconds greater than 0',
      ],
    ]);
  });
});
