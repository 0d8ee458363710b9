import type { CompiledRule } from './compile-rule.js';
import type { RuleLimits } from './limits.js';
import type { RuleSet } from './rule-set.js';
import { parseEvent } from './event.js';
import { keyOf } from './verdict.js';

/** How a sample of events meets the rules keyed by a field of their own (`key`). */
export interface KeyCoverage {
  readonly ruleId: string;
  /** The fields the rule is keyed by (one, or several for a composite key). */
  readonly keyFields: readonly string[];
  /** Events of the sample the rule would look at (of its types). */
  readonly ofItsTypes: number;
  /** Those that lack the key field (or hold neither a string nor a finite number in it). */
  readonly keyMissing: number;
}

/**
 * For each rule of `ruleIds` in `ruleSet` that has a `key`, how many events of `sample`
 * (payloads as stored; each judged at its own store time) are of its types, and how many of
 * those lack a key field: the same reading as the live path, which skips such an event for that rule
 * and counts it (`vigil_rule_key_missing_total`). A rule keyed by a field its events never carry
 * never matches, so the control plane warns when a sample shows it. Events the live path would
 * dead-letter (not JSON, no type, …) are left out.
 */
export function keyCoverage(
  ruleSet: RuleSet,
  ruleIds: readonly string[],
  sample: readonly { readonly data: Uint8Array; readonly storedAt: number }[],
  limits: RuleLimits,
): KeyCoverage[] {
  const rows: {
    rule: CompiledRule;
    keyFields: readonly string[];
    ofItsTypes: number;
    keyMissing: number;
  }[] = [];
  for (const id of ruleIds) {
    const rule = ruleSet.rules.get(id);
    if (rule?.keyFields !== undefined)
      rows.push({ rule, keyFields: rule.keyFields, ofItsTypes: 0, keyMissing: 0 });
  }
  if (rows.length === 0) return [];
  for (const m of sample) {
    const parsed = parseEvent(m.data, m.storedAt, limits);
    if (!parsed.ok) continue;
    const judged = ruleSet.rulesFor(parsed.type);
    for (const row of rows) {
      if (!judged.includes(row.rule)) continue;
      row.ofItsTypes++;
      if (keyOf(row.rule, parsed.event, '') === undefined) row.keyMissing++;
    }
  }
  return rows.map(({ rule, keyFields, ofItsTypes, keyMissing }) => ({
    ruleId: rule.id,
    keyFields,
    ofItsTypes,
    keyMissing,
  }));
}
