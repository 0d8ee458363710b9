/**
 * Explains a verdict: evaluates a condition tree on one event the way json-rules-engine 7.x does
 * and returns the tree with each leaf's fact value, compared value and result — the shape of
 * json-rules-engine's rule result (`factResult`, `valueResult`, `result`). Conditions that the
 * priority short-circuit never evaluated carry no `result`, as there. Pure, like the compiled
 * evaluator; the property test checks that both give json-rules-engine's verdict.
 */
import { keyFieldsOf, keyValue } from './rule-key.js';
import type { SourceHop } from './source-hop.js';
import type { CompiledRule } from './compile-rule.js';
import { parsePath, resolveSegments } from './json-path.js';
import { lookupFact, type ModelRegistry } from './models.js';
import { resolveOperator } from './operators.js';
import type { Condition, LeafCondition, TopCondition } from './types.js';

/** A condition with its evaluation: leaves get `factResult`, `valueResult` and `result`. */
export type ExplainedCondition =
  | {
      readonly all: ExplainedCondition[];
      result?: boolean;
      readonly priority?: number;
      readonly name?: string;
    }
  | {
      readonly any: ExplainedCondition[];
      result?: boolean;
      readonly priority?: number;
      readonly name?: string;
    }
  | {
      readonly not: ExplainedCondition;
      result?: boolean;
      readonly priority?: number;
      readonly name?: string;
    }
  | (LeafCondition & {
      factResult?: unknown;
      valueResult?: unknown;
      result?: boolean;
      /** Why the evaluation threw here (json-rules-engine would reject the whole run). */
      error?: string;
    });

/** The verdict of a condition tree: `error` where json-rules-engine's run would reject. */
export type ConditionVerdict = boolean | 'error';

export interface ConditionExplanation {
  readonly verdict: ConditionVerdict;
  readonly conditions: ExplainedCondition;
}

/** What the facts of an explanation come from. */
export interface ExplainFacts {
  readonly event: Readonly<Record<string, unknown>>;
  readonly models: ModelRegistry;
  /** Events of earlier sequence steps, by step name (`step:<name>`). */
  readonly steps?: Readonly<Record<string, unknown>>;
}

class Thrown extends Error {}

function factValue(
  facts: ExplainFacts,
  fact: string,
  params: Readonly<Record<string, unknown>> | undefined,
  path: string | undefined,
  scores: Map<string, number>,
): unknown {
  const colon = fact.indexOf(':');
  const prefix = colon > 0 ? fact.slice(0, colon) : '';
  const name = colon > 0 ? fact.slice(colon + 1) : fact;
  let v: unknown;
  if (prefix === 'model') {
    const m = facts.models.get(name);
    if (m?.kind === 'scorer') {
      v = scores.get(name) ?? m.score(facts.event);
      scores.set(name, v as number);
    }
  } else if (prefix === 'list') {
    const m = facts.models.get(name);
    const key = typeof params?.key === 'string' ? params.key : undefined;
    v = m === undefined ? undefined : lookupFact(m, facts.event, key);
  } else if (prefix === 'step') {
    const s = facts.steps;
    v = s !== undefined && Object.hasOwn(s, name) ? s[name] : undefined;
  } else v = Object.hasOwn(facts.event, fact) ? facts.event[fact] : undefined;
  if (!path) return v;
  const parsed = parsePath(path);
  if (!parsed.ok) throw new Thrown(parsed.message);
  // The almanac applies a path only to object-like values; any other value passes through.
  return v !== null && typeof v === 'object' ? resolveSegments(v, parsed.segments) : v;
}

const isFactRef = (
  v: unknown,
): v is { fact: string; path?: string; params?: Record<string, unknown> } =>
  typeof v === 'object' && v !== null && Object.hasOwn(v, 'fact');

function copy(c: Condition): ExplainedCondition {
  const extra = {
    ...(c.priority === undefined ? {} : { priority: c.priority }),
    ...(c.name === undefined ? {} : { name: c.name }),
  };
  if ('all' in c) return { all: c.all.map(copy), ...extra };
  if ('any' in c) return { any: c.any.map(copy), ...extra };
  if ('not' in c) return { not: copy(c.not), ...extra };
  return {
    fact: c.fact,
    operator: c.operator,
    value: c.value,
    ...(c.path === undefined ? {} : { path: c.path }),
    ...(c.params === undefined ? {} : { params: c.params }),
    ...extra,
  };
}

interface Run {
  readonly facts: ExplainFacts;
  readonly scores: Map<string, number>;
}

function evalNode(run: Run, n: ExplainedCondition): boolean {
  let r: boolean;
  if ('all' in n) r = group(run, n.all, 'all');
  else if ('any' in n) r = group(run, n.any, 'any');
  else if ('not' in n) r = !evalNode(run, n.not);
  else {
    const op = resolveOperator(n.operator);
    try {
      if (op === undefined) throw new Thrown(`Unknown operator: ${n.operator}`);
      const right = isFactRef(n.value)
        ? factValue(run.facts, n.value.fact, n.value.params, n.value.path, run.scores)
        : n.value;
      const left = factValue(run.facts, n.fact, n.params, n.path, run.scores);
      n.valueResult = right;
      n.factResult = left;
      r = op.evaluate(left, right);
    } catch (e) {
      n.error = e instanceof Error ? e.message : String(e);
      throw e instanceof Thrown ? e : new Thrown(n.error);
    }
  }
  n.result = r;
  return r;
}

/** json-rules-engine's prioritizeAndRun: groups by priority, highest first; all of a group runs. */
function group(run: Run, children: ExplainedCondition[], op: 'all' | 'any'): boolean {
  if (children.length === 0) return true;
  if (children.length === 1) return evalNode(run, children[0] as ExplainedCondition);
  const byPriority = new Map<number, ExplainedCondition[]>();
  for (const c of children) {
    const p = c.priority || 1;
    byPriority.set(p, [...(byPriority.get(p) ?? []), c]);
  }
  for (const [, set] of [...byPriority].sort((a, b) => b[0] - a[0])) {
    let first: unknown;
    const results = set.map((c) => {
      try {
        return evalNode(run, c);
      } catch (e) {
        first ??= e;
        return false;
      }
    });
    if (first !== undefined) throw first;
    const v = op === 'all' ? results.every((x) => x) : results.some((x) => x);
    if (op === 'all' ? !v : v) return v;
  }
  return op === 'all';
}

/** Evaluates a condition tree on an event and explains the verdict. */
export function explainCondition(
  condition: TopCondition,
  facts: ExplainFacts,
): ConditionExplanation {
  const tree = copy(condition);
  const run: Run = { facts, scores: new Map() };
  try {
    return { verdict: evalNode(run, tree), conditions: tree };
  } catch {
    return { verdict: 'error', conditions: tree };
  }
}

/** Why one rule does or does not take an event, step by step. */
export interface RuleExplanation {
  readonly ruleId: string;
  readonly version: number;
  readonly paused: boolean;
  /** `match`: the rule takes the event (alerts on it, or feeds it to its pattern); `error`: it fails on it. */
  readonly verdict: 'match' | 'no-match' | 'error';
  /** Each check, in the order the partition makes them. */
  readonly checks: {
    readonly type: {
      readonly eventType: unknown;
      readonly on: readonly string[];
      readonly passed: boolean;
    };
    readonly key: {
      /** The rule's `key` as written; null for the partition key. */
      readonly field: string | readonly string[] | null;
      /** The field's value (a composite key: each field's, by name); the partition key's otherwise. */
      readonly value: unknown;
      readonly passed: boolean;
      /**
       * With the re-keying hop on and the rule re-keyed: the key space its state lives in and the
       * partition of this event's key there (see `source-hop.ts`).
       */
      readonly rekeyed?: { readonly space: string; readonly partition: number | null };
    };
    readonly when?: ConditionExplanation;
  };
  /** For pattern rules: the event is one input; whether it alerts depends on the key's state. */
  readonly pattern?: {
    readonly kind: string;
    readonly note: string;
    readonly steps?: {
      readonly name: string;
      readonly typePassed: boolean;
      readonly when?: ConditionExplanation;
    }[];
    readonly expect?: { readonly typePassed: boolean; readonly when?: ConditionExplanation };
  };
}

const typeOk = (on: readonly string[] | undefined, type: unknown): boolean =>
  on === undefined || on.includes('*') || (typeof type === 'string' && on.includes(type));

/**
 * Explains how one rule version judges one event (already parsed): its `on` types, its key field
 * and its `when`; for pattern rules also each step's or the `expect` condition on this event.
 */
export function explainRule(
  rule: CompiledRule,
  event: Readonly<Record<string, unknown>>,
  models: ModelRegistry,
  partitionKey = '',
  /** The service's re-keying hop, when on. */
  hop?: SourceHop,
): RuleExplanation {
  const def = rule.def;
  const type = event.type;
  const typePassed = typeOk(def.on, type);
  const fields = keyFieldsOf(def.key);
  const keyText = fields === undefined ? undefined : keyValue(fields, event);
  const keyPassed = fields === undefined || keyText !== undefined;
  const rekeyed =
    hop === undefined || !hop.sendsOn(rule)
      ? undefined
      : {
          space: rule.keySpace as string,
          partition: keyText === undefined ? null : hop.partitionOf(keyText),
        };
  const raw = (f: string): unknown => (Object.hasOwn(event, f) ? event[f] : undefined);
  const shownKey =
    fields === undefined
      ? partitionKey
      : fields.length === 1
        ? raw(fields[0] as string)
        : Object.fromEntries(fields.map((f) => [f, raw(f)]));
  const facts: ExplainFacts = { event, models };
  const when = def.when === undefined ? undefined : explainCondition(def.when, facts);
  const verdict: RuleExplanation['verdict'] =
    when?.verdict === 'error'
      ? 'error'
      : typePassed && keyPassed && (when === undefined || when.verdict === true)
        ? 'match'
        : 'no-match';
  const p = def.pattern;
  let pattern: RuleExplanation['pattern'];
  if (p?.kind === 'threshold')
    pattern = {
      kind: p.kind,
      note: `a matching event counts towards ${p.aggregate}${p.field ? `(${p.field})` : ''} over ${String(p.window)} per key; it alerts when that is ${p.operator} ${p.value}`,
    };
  else if (p?.kind === 'sequence')
    pattern = {
      kind: p.kind,
      note: 'a matching event may start or advance a partial match of its key; steps referring to earlier steps (step:<name>) see them as missing here',
      steps: p.steps.map((s) => ({
        name: s.name,
        typePassed: typeOk(s.on, type),
        ...(s.when === undefined ? {} : { when: explainCondition(s.when, facts) }),
      })),
    };
  else if (p?.kind === 'absence')
    pattern = {
      kind: p.kind,
      note: `a matching event starts a wait of ${String(p.within)}; an expected event of the same key cancels it`,
      expect: {
        typePassed: typeOk(p.expect.on, type),
        ...(p.expect.when === undefined ? {} : { when: explainCondition(p.expect.when, facts) }),
      },
    };
  return {
    ruleId: rule.id,
    version: rule.version,
    paused: rule.paused,
    verdict,
    checks: {
      type: { eventType: type, on: def.on, passed: typePassed },
      key: {
        field: def.key ?? null,
        value: shownKey,
        passed: keyPassed,
        ...(rekeyed === undefined ? {} : { rekeyed }),
      },
      ...(when === undefined ? {} : { when }),
    },
    ...(pattern === undefined ? {} : { pattern }),
  };
}
