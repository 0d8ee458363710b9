import type { CompiledRule } from '../compile-rule.js';
import { absence } from './absence.js';
import type { KeyState } from './host.js';
import { sequence } from './sequence.js';
import { threshold } from './threshold.js';

/** The pattern operators by the `kind` of the pattern they run. */
export const PATTERN_OPERATORS = { threshold, sequence, absence } as const;

/** Whether a key state holds no operator state worth keeping for `rule` (a rule with no pattern keeps none). */
export function patternIdle(rule: CompiledRule, ks: KeyState): boolean {
  const p = rule.pattern;
  return p === undefined || PATTERN_OPERATORS[p.kind].idle(ks);
}
