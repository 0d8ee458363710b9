import { describe, expect, it } from 'vitest';
import { applyControl, emptyRuleSet } from '../../rules/index.js';
import type { CompiledRule } from '../../rules/compile-rule.js';
import { Hits, TRIGGER } from '../../rules/verdict.js';

const applied = applyControl(
  emptyRuleSet(),
  {
    op: 'replace-all',
    rules: ['a', 'b'].map((id) => ({
      id,
      on: ['payment'],
      when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 1 }] },
    })),
  },
  1,
);
if (!applied.ok) throw new Error('rules rejected');
const [a, b] = ['a', 'b'].map((id) => applied.ruleSet.rules.get(id) as CompiledRule) as [
  CompiledRule,
  CompiledRule,
];

describe('Hits', () => {
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
