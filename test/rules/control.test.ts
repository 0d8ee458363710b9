import { describe, expect, it } from 'vitest';
import {
  applyControl,
  DEFAULT_LIMITS,
  emptyRuleSet,
  parseControl,
  restoreRuleSet,
  ruleSetText,
  ruleSetToJSON,
  validateControl,
  type RuleSet,
  stateLineages,
} from '../../rules/index.js';
import { Feed, ruleSetOf, upsert } from './harness.js';

const count = (value: number, window = 1000) =>
  ({
    id: 'cnt',
    on: ['p'],
    pattern: { kind: 'threshold', aggregate: 'count', window, operator: '>=', value },
  }) as never;

function apply(rs: RuleSet, message: unknown) {
  return applyControl(rs, message, rs.controlSeq + 1);
}

describe('applying control messages (broadcast state)', () => {
  it('versions a rule with the control sequence that made it current', () => {
    const rs = ruleSetOf(upsert(count(3)), {
      op: 'upsert-model',
      model: { id: 'm', kind: 'lookup', values: ['a'] },
    });
    expect(rs.controlSeq).toBe(2);
    expect(rs.rules.get('cnt')?.version).toBe(1);
  });

  it('keeps state on a compatible change, resets it on an incompatible one, and says so', () => {
    const rs = ruleSetOf(upsert(count(3)));
    const kept = apply(rs, upsert(count(5)));
    expect(kept.ok && kept.changes).toEqual([{ ruleId: 'cnt', action: 'kept' }]);
    expect(kept.ruleSet.rules.get('cnt')?.stateEpoch).toBe(1);
    const reset = apply(rs, upsert(count(3, 2000)));
    expect(reset.ok && reset.changes).toEqual([
      { ruleId: 'cnt', action: 'reset', reason: 'window changed' },
    ]);
    expect(reset.ruleSet.rules.get('cnt')?.stateEpoch).toBe(2);
  });

  it('clear-state starts a new state epoch for one rule or all', () => {
    const rs = ruleSetOf(upsert(count(3)), upsert({ id: 'other', on: ['p'], when: { all: [] } }));
    const one = apply(rs, { op: 'clear-state', ruleId: 'cnt' });
    expect([...one.ruleSet.rules.values()].map((r) => [r.id, r.stateEpoch])).toEqual([
      ['cnt', 3],
      ['other', 2],
    ]);
    const all = apply(rs, { op: 'clear-state' });
    expect([...all.ruleSet.rules.values()].map((r) => r.stateEpoch)).toEqual([3, 3]);
  });

  it('a changeset is atomic: one bad change rejects all, with pointers into the changeset', () => {
    const rs = ruleSetOf(upsert(count(3)));
    const o = apply(rs, {
      op: 'changeset',
      changes: [upsert(count(4)), { op: 'delete-rule', id: 'nope' }],
    });
    expect(o.ok).toBe(false);
    expect(!o.ok && o.problems).toEqual([
      {
        pointer: '/changes/1/id',
        message: 'there is no rule "nope"; list the rules to find its id',
      },
    ]);
    expect(o.ruleSet.rules.get('cnt')?.version).toBe(1); // unchanged
    expect(o.ruleSet.controlSeq).toBe(2); // but the position was considered
  });

  it('refuses a rule that uses a model that does not exist, unless the same changeset adds it', () => {
    const rule = {
      id: 'r',
      on: ['p'],
      when: { all: [{ fact: 'country', operator: 'in', value: { fact: 'list:risky' } }] },
    };
    const bad = apply(emptyRuleSet(), upsert(rule as never));
    expect(!bad.ok && bad.problems[0]?.message).toMatch(/there is no lookup table "risky"/);
    const good = apply(emptyRuleSet(), {
      op: 'changeset',
      changes: [
        { op: 'upsert-model', model: { id: 'risky', kind: 'lookup', values: ['NG'] } },
        upsert(rule as never),
      ],
    });
    expect(good.ok).toBe(true);
    const del = apply(good.ruleSet, { op: 'delete-model', id: 'risky' });
    expect(!del.ok && del.problems[0]?.message).toMatch(/rule "r" uses "list:risky"/);
  });

  it('replace-all swaps everything atomically and keeps the state of unchanged rules', () => {
    const rs = ruleSetOf(upsert(count(3)), upsert({ id: 'gone', on: ['p'], when: { all: [] } }));
    const o = apply(rs, { op: 'replace-all', rules: [count(3)], models: [] });
    expect(o.ok && o.changes).toEqual([
      { ruleId: 'cnt', action: 'kept' },
      { ruleId: 'gone', action: 'dropped' },
    ]);
  });

  it('validation returns every problem with a JSON pointer and a fix', () => {
    const problems = validateControl(emptyRuleSet(), {
      op: 'upsert-rule',
      rule: {
        id: 'bad id!',
        on: [],
        when: {
          all: [
            { fact: '__proto__', operator: 'bigger', value: 1 },
            { fact: 'a', operator: 'in', value: 5 },
            { fact: 'a', path: '$..x', operator: 'equal', value: 1 },
          ],
        },
        pattern: { kind: 'threshold', aggregate: 'sum', window: '99y', operator: '>', value: 'x' },
        alert: { severity: 'High!' },
      },
    });
    expect(problems.map((p) => p.pointer)).toEqual([
      '/rule/id',
      '/rule/on',
      '/rule/when/all/0/fact',
      '/rule/when/all/0/operator',
      '/rule/when/all/1/value',
      '/rule/when/all/2/path',
      '/rule/pattern/field',
      '/rule/pattern/window',
      '/rule/pattern/value',
      '/rule/alert/severity',
    ]);
    for (const p of problems) expect(p.message.length).toBeGreaterThan(20);
  });

  it('enforces limits: condition depth, condition count, window length, rule count', () => {
    const limits = {
      maxConditionDepth: 2,
      maxConditions: 2,
      maxWindowMs: 1000,
      maxRules: 1,
    } as const;
    const deep = { all: [{ any: [{ not: { fact: 'a', operator: 'equal', value: 1 } }] }] };
    const rs = emptyRuleSet();
    const o = applyControl(
      rs,
      upsert({
        id: 'r',
        on: ['p'],
        when: deep,
        pattern: { kind: 'threshold', aggregate: 'count', window: 5000, operator: '>', value: 1 },
      } as never),
      1,
      { ...defaults(), ...limits },
    );
    expect(!o.ok && o.problems.map((p) => p.message)).toEqual([
      expect.stringMatching(/deeper than the limit of 2/),
      expect.stringMatching(/over the limit of 1000 ms/),
    ]);
    const many = { all: [1, 2, 3].map((v) => ({ fact: 'a', operator: 'equal', value: v })) };
    const o2 = applyControl(rs, upsert({ id: 'r', on: ['p'], when: many } as never), 1, {
      ...defaults(),
      ...limits,
    });
    expect(!o2.ok && o2.problems[0]?.message).toMatch(/more than 2 conditions/);
    const o3 = applyControl(
      rs,
      {
        op: 'replace-all',
        rules: [
          { id: 'a', on: ['p'], when: { all: [] } },
          { id: 'b', on: ['p'], when: { all: [] } },
        ],
      },
      1,
      { ...defaults(), ...limits },
    );
    expect(!o3.ok && o3.problems[0]?.message).toMatch(/2 rules, over the limit of 1/);
  });

  it('parses control bytes and reports non-JSON as a problem', () => {
    expect(parseControl('{"op":"delete-rule","id":"x"}')).toEqual({
      ok: true,
      message: { op: 'delete-rule', id: 'x' },
    });
    const bad = parseControl('{op');
    expect(!bad.ok && bad.problems[0]?.message).toMatch(/not JSON/);
  });

  it('a stored rule set restores to the same rules, versions and epochs', () => {
    const rs = ruleSetOf(
      upsert(count(3)),
      {
        op: 'upsert-model',
        model: { id: 's', kind: 'linear', features: [{ name: 'x' }], weights: { x: 2 } },
      },
      { op: 'pause-rule', id: 'cnt' },
    );
    const back = restoreRuleSet(JSON.parse(JSON.stringify(ruleSetToJSON(rs))));
    expect(ruleSetToJSON(back)).toEqual(ruleSetToJSON(rs));
    expect(back.rulesFor('p')).toEqual([]); // paused
  });

  it('stores a rule set as the text of ruleSetToJSON, also after changes reuse the texts of the others', () => {
    const other = {
      id: 'plain',
      on: ['p'],
      when: { all: [{ fact: 'a', operator: 'equal', value: 1 }] },
    };
    const steps: unknown[] = [
      upsert(count(3)),
      upsert(other),
      { op: 'upsert-model', model: { id: 'm', kind: 'lookup', values: ['a', 'é"\\'] } },
      { op: 'pause-rule', id: 'cnt' },
      upsert({ ...other, when: { all: [{ fact: 'a', operator: 'equal', value: 2 }] } }),
      { op: 'resume-rule', id: 'cnt' },
      { op: 'clear-state', id: 'cnt' },
      { op: 'delete-model', id: 'm' },
      { op: 'delete-rule', id: 'plain' },
    ];
    let rs = emptyRuleSet();
    expect(ruleSetText(rs)).toBe(JSON.stringify(ruleSetToJSON(rs)));
    for (const step of steps) {
      const r = apply(rs, step);
      if (!r.ok) throw new Error(JSON.stringify(r.problems));
      rs = r.ruleSet;
      // Twice: the second is built from the cached texts.
      expect(ruleSetText(rs)).toBe(JSON.stringify(ruleSetToJSON(rs)));
      expect(ruleSetText(rs)).toBe(JSON.stringify(ruleSetToJSON(rs)));
    }
  });
});

function defaults() {
  return { ...DEFAULT_LIMITS };
}

describe('aligned activation at the epoch marker (G2)', () => {
  const v1 = ruleSetOf(
    upsert({
      id: 'big',
      on: ['p'],
      when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 100 }] },
    }),
  );
  const v2 = applyControl(
    v1,
    upsert({
      id: 'big',
      on: ['p'],
      when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 10 }] },
    }),
    2,
  ).ruleSet;

  it('events before the marker are judged by the old rules, events after it by the new ones', () => {
    const f = new Feed(v1);
    f.event({ type: 'p', amount: 50, ts: 1 });
    expect(f.marker(v2).applied).toBe(2);
    f.event({ type: 'p', amount: 50, ts: 2 });
    expect(f.alerts.map((a) => [a.events[0]?.seq, a.ruleVersion])).toEqual([[3, 2]]);
  });

  it('holds for stateful rules too, even when buffered events are released after the marker', () => {
    const w1 = ruleSetOf(upsert(count(2)));
    const w2 = applyControl(w1, upsert(count(2, 50)), 2).ruleSet; // incompatible: new state
    const f = new Feed(w1, 1000);
    f.event({ type: 'p', ts: 100 });
    f.event({ type: 'p', ts: 200 });
    f.marker(w2);
    f.event({ type: 'p', ts: 150 }); // after the marker in the log, before in event time
    f.event({ type: 'p', ts: 5000 });
    // Releases everything (the watermark reaches 5000), before the new window of 5000 expires.
    f.tick(6001);
    // Old lineage: 100, 200 -> fires at 200 under version 1. New lineage (window 50): 150 alone, 5000 alone.
    expect(f.alerts.map((a) => [a.ts, a.ruleVersion, a.values.count])).toEqual([[200, 1, 2]]);
    // Once no buffered event refers to version 1, its state is gone.
    expect(stateLineages(f.state)).toEqual(['cnt@2']);
    // And once event time is past the new window's last entry, so is that.
    f.tick(100_000);
    expect(stateLineages(f.state)).toEqual([]);
  });

  it('a duplicate or stale marker changes nothing', () => {
    const f = new Feed(v2);
    expect(f.marker(v1).applied).toBeUndefined();
    expect(f.state.ruleSet).toBe(v2);
  });
});
