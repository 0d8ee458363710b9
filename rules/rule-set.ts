import { compileRule, stateId, type CompiledRule } from './compile-rule.js';
import { GuardIndex } from './guard-index.js';
import { compileModel, type CompiledModel, type ModelRegistry } from './models.js';
import type { Model, Rule } from './types.js';
import type { ConditionRefs } from './validate-condition.js';

/**
 * Broadcast state: the rule set and models in force after a prefix of `CONTROL`. Immutable, so a
 * partition can keep older versions alive for events still in its reorder buffer.
 */
export interface RuleSet {
  /** `CONTROL` sequence of the last control message this rule set reflects (0: none). */
  readonly controlSeq: number;
  readonly rules: ReadonlyMap<string, CompiledRule>;
  readonly models: ModelRegistry;
  /** What each rule's conditions refer to (model, list and step names). */
  readonly refs: ReadonlyMap<string, ConditionRefs>;
  /** Active rules that apply to an event of a type, ordered by id: the type index. */
  rulesFor(type: string): readonly CompiledRule[];
  /** The guards of `rulesFor(type)`, position for position (see `guard-index.ts`). */
  guardsFor(type: string): GuardIndex;
  /** The state lineages of this rule set's rules. */
  readonly stateIds: ReadonlySet<string>;
}

/**
 * The rule set in force after a given `CONTROL` sequence, or undefined when it is not held (a
 * restore or a marker may name an older one than the current).
 */
export type RuleSetAt = (controlSeq: number) => RuleSet | undefined;

const NO_RULES: readonly CompiledRule[] = Object.freeze([]);

/** Builds a rule set (and its type index) from compiled rules and models. */
export function buildRuleSet(
  controlSeq: number,
  rules: ReadonlyMap<string, CompiledRule>,
  models: ReadonlyMap<string, CompiledModel>,
  refs: ReadonlyMap<string, ConditionRefs>,
): RuleSet {
  const active = [...rules.values()]
    .filter((r) => !r.paused)
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const anyType = active.filter((r) => r.indexTypes.includes('*'));
  const byType = new Map<string, CompiledRule[]>();
  for (const r of active) {
    if (r.indexTypes.includes('*')) continue;
    for (const t of r.indexTypes) {
      const list = byType.get(t) ?? [];
      list.push(r);
      byType.set(t, list);
    }
  }
  if (anyType.length > 0) {
    for (const [t, list] of byType)
      byType.set(
        t,
        [...list, ...anyType].sort((a, b) => (a.id < b.id ? -1 : 1)),
      );
  }
  const fallback = anyType.length > 0 ? Object.freeze(anyType) : NO_RULES;
  // Built on the first event of a type: a change rebuilds the rule set, and most changes are
  // followed by events of a few types only.
  const guards = new Map<readonly CompiledRule[], GuardIndex>();
  const rulesFor = (type: string): readonly CompiledRule[] => byType.get(type) ?? fallback;
  return {
    controlSeq,
    rules,
    models,
    refs,
    rulesFor,
    guardsFor: (type) => {
      const list = rulesFor(type);
      let g = guards.get(list);
      if (g === undefined) {
        g = new GuardIndex(list.map((r) => r.guard));
        guards.set(list, g);
      }
      return g;
    },
    stateIds: new Set([...rules.values()].map(stateId)),
  };
}

/** The rule set before any control message. */
export function emptyRuleSet(): RuleSet {
  return buildRuleSet(0, new Map(), new Map(), new Map());
}

/** A rule set as JSON: what is stored once per control sequence and restored by {@link ruleSetFromJSON}. */
export interface RuleSetJSON {
  readonly format: 'vigil.rule-set.v1';
  readonly controlSeq: number;
  readonly rules: readonly {
    readonly rule: Rule;
    readonly version: number;
    readonly stateEpoch: number;
    readonly paused: boolean;
  }[];
  readonly models: readonly Model[];
}

/** Serialises a rule set (definitions only; compiled closures are rebuilt on restore). */
export function ruleSetToJSON(rs: RuleSet): RuleSetJSON {
  return {
    format: 'vigil.rule-set.v1',
    controlSeq: rs.controlSeq,
    rules: [...rs.rules.values()].map((r) => ({
      rule: r.def,
      version: r.version,
      stateEpoch: r.stateEpoch,
      paused: r.paused,
    })),
    models: [...rs.models.values()].map((m) => m.def),
  };
}

// A rule version's or model's JSON text, made once: a change replaces one entry and keeps every
// other object, so a rule set of 1,000 rules is stored after each change by joining texts
// (JSON.stringify of the whole set, per change, held up a worker's thread for milliseconds).
const ruleTexts = new WeakMap<CompiledRule, string>();
const modelTexts = new WeakMap<CompiledModel, string>();

function cachedText<K extends object>(
  cache: WeakMap<K, string>,
  k: K,
  make: () => unknown,
): string {
  let text = cache.get(k);
  if (text === undefined) {
    text = JSON.stringify(make());
    cache.set(k, text);
  }
  return text;
}

/**
 * `JSON.stringify(ruleSetToJSON(rs))`, the same text, built from each rule's and model's text
 * made once per version: what a checkpoint stores for each control sequence.
 */
export function ruleSetText(rs: RuleSet): string {
  let rules = '';
  for (const r of rs.rules.values()) {
    const text = cachedText(ruleTexts, r, () => ({
      rule: r.def,
      version: r.version,
      stateEpoch: r.stateEpoch,
      paused: r.paused,
    }));
    rules += rules === '' ? text : ',' + text;
  }
  let models = '';
  for (const m of rs.models.values()) {
    const text = cachedText(modelTexts, m, () => m.def);
    models += models === '' ? text : ',' + text;
  }
  return `{"format":"vigil.rule-set.v1","controlSeq":${JSON.stringify(rs.controlSeq)},"rules":[${rules}],"models":[${models}]}`;
}

/** Rebuilds a rule set from {@link ruleSetToJSON}'s output. `refsOf` recomputes each rule's references. */
export function ruleSetFromJSON(json: RuleSetJSON, refsOf: (rule: Rule) => ConditionRefs): RuleSet {
  const rules = new Map<string, CompiledRule>();
  const refs = new Map<string, ConditionRefs>();
  for (const r of json.rules) {
    rules.set(r.rule.id, compileRule(r.rule, r.version, r.stateEpoch, r.paused));
    refs.set(r.rule.id, refsOf(r.rule));
  }
  const models = new Map<string, CompiledModel>();
  for (const m of json.models) models.set(m.id, compileModel(m));
  return buildRuleSet(json.controlSeq, rules, models, refs);
}
