import { applyControl, emptyRuleSet, type Rule, type RuleSet } from '../rules/index.js';

/** The rule set of `rules`, as one `replace-all` at control sequence 1; throws if it is refused. */
export function ruleSetOf(rules: readonly Rule[]): RuleSet {
  const outcome = applyControl(emptyRuleSet(), { op: 'replace-all', rules }, 1);
  if (!outcome.ok)
    throw new Error(
      `rule set refused: ${outcome.problems.map((p) => `${p.pointer} ${p.message}`).join('; ')}`,
    );
  return outcome.ruleSet;
}

/**
 * The sliding-window rule of the window and checkpoint benchmarks: the sum of `amount` over the
 * last hour of a key's `payment` events, at least `value` (a value no key reaches keeps alerts
 * out of what is measured).
 */
export function velocityRule(value: number): Rule {
  return {
    id: 'velocity',
    on: ['payment'],
    pattern: {
      kind: 'threshold',
      aggregate: 'sum',
      field: 'amount',
      window: '1h',
      operator: '>=',
      value,
    },
  };
}
