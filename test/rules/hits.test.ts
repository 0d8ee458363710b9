import { describe, expect, it } from 'vitest';
import { applyControl, emptyRuleSet } from '../../rules/index.js';
import type { CompiledRule } from '../../rules/compile-rule.js';
import { Hits, TRIGGER } from '../../rules/verdict.js';

const applied = applyControl(
  emptyRuleSet(),
  {
    op: 'replace-all',
    rules: ['a', 'b', 'c', 'd'].map((id) => ({
      id,
      on: ['payment'],
      when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 1 }] },
    })),
  },
  1,
);
if (!applied.ok) throw new Error('rules rejected');
const [a, b, c, d] = ['a', 'b', 'c', 'd'].map(
  (id) => applied.ruleSet.rules.get(id) as CompiledRule,
) as [CompiledRule, CompiledRule, CompiledRule, CompiledRule];

describe('Hits', () => {
  it('counts the later hits under the same key: the lineages that key may gain next', () => {
    const same = new Hits('k1');
    for (const r of [a, b, c]) same.add(r, 'k1', TRIGGER);
    expect([0, 1, 2].map((i) => same.sameKeyAfter(i))).toEqual([2, 1, 0]);
    // Rules keyed by another field: their hits do not count for the record's key, nor its for theirs.
    const mixed = new Hits('k1');
    mixed.add(a, 'k1', TRIGGER);
    mixed.add(b, 'm7', TRIGGER);
    mixed.add(c, 'k1', TRIGGER);
    mixed.add(d, 'm7', TRIGGER);
    expect([0, 1, 2, 3].map((i) => mixed.sameKeyAfter(i))).toEqual([1, 1, 0, 0]);
  });

  it('keeps its hits when trimmed', () => {
    const h = new Hits('k1');
    h.add(a, 'k1', TRIGGER);
    h.add(b, 'm7', TRIGGER | 2);
    h.trim();
    expect(h.toArray().map((x) => [x.rule.id, x.key, x.trigger, x.expected])).toEqual([
      ['a', 'k1', true, false],
      ['b', 'm7', true, true],
    ]);
  });
});
