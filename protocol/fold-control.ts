import {
  applyControl,
  emptyRuleSet,
  parseControl,
  skipControl,
  type ControlOutcome,
  type RuleLimits,
  type RuleSet,
} from '../rules/index.js';

/**
 * Applies one `CONTROL` message (its bytes, at sequence `seq`) to the rule set before it: the
 * fold every shard, the back-test and the tests' reference run, so each accepts or rejects a
 * message alike. A message that is not JSON or not a control message is rejected with its
 * problems and still advances the rule set's sequence (nothing else changes).
 */
export function foldControl(
  current: RuleSet,
  data: Uint8Array,
  seq: number,
  limits?: RuleLimits,
): ControlOutcome {
  const parsed = parseControl(data, limits);
  return parsed.ok
    ? applyControl(current, parsed.message, seq, limits)
    : { ok: false, ruleSet: skipControl(current, seq), problems: parsed.problems };
}

/** The rule set after every sequence of a `CONTROL` log (0: the empty one), folded in order. */
export function foldVersions(
  messages: Iterable<{ readonly seq: number; readonly data: Uint8Array }>,
  limits?: RuleLimits,
): Map<number, RuleSet> {
  const versions = new Map<number, RuleSet>();
  let rs = emptyRuleSet();
  versions.set(0, rs);
  for (const m of messages) {
    rs = foldControl(rs, m.data, m.seq, limits).ruleSet;
    versions.set(m.seq, rs);
  }
  return versions;
}
