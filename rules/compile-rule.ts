import { keyFieldsOf, keySpaceOf, sameKeyFields } from './rule-key.js';
import {
  compileCondition,
  compileConditionInfo,
  type CompiledCondition,
} from './compile-condition.js';
import { conditionGuard, type Guard } from './guard-index.js';
import { parseDuration } from './duration.js';
import { lineageNumber } from './lineage-number.js';
import type { AfterMatch, Aggregate, Comparison, Contiguity, Rule, TopCondition } from './types.js';

export interface CompiledThreshold {
  readonly kind: 'threshold';
  readonly aggregate: Aggregate;
  readonly field: string | undefined;
  readonly windowMs: number;
  readonly tumbling: boolean;
  readonly compare: (aggregate: number) => boolean;
}

export interface CompiledStep {
  readonly name: string;
  readonly types: ReadonlySet<string> | undefined;
  readonly when: CompiledCondition | undefined;
  readonly strict: boolean;
  readonly times: number;
  /** Whether a later step refers to this step's event, so partial matches must keep it whole. */
  readonly keepEvent: boolean;
}

export interface CompiledSequence {
  readonly kind: 'sequence';
  readonly steps: readonly CompiledStep[];
  readonly withinMs: number;
  readonly skipPastLast: boolean;
}

export interface CompiledAbsence {
  readonly kind: 'absence';
  readonly withinMs: number;
  readonly expectTypes: ReadonlySet<string>;
  readonly expectAny: boolean;
  readonly expectWhen: CompiledCondition | undefined;
}

export type CompiledPattern = CompiledThreshold | CompiledSequence | CompiledAbsence;

/** A rule version ready to judge events. Immutable; shared by every partition. */
export interface CompiledRule {
  readonly id: string;
  /** `CONTROL` sequence of the change that made this version current. */
  readonly version: number;
  /**
   * `CONTROL` sequence at which this rule's keyed state began. A change that keeps the state keeps
   * the epoch; a reset (incompatible change, `clear-state`) starts a new one, so old and new state
   * can never mix, even for events still in the reorder buffer.
   */
  readonly stateEpoch: number;
  /** The state lineage, {@link stateId} of this version, made once: the hot path keys maps by it. */
  readonly sid: string;
  /** The lineage's number in this thread (`lineageNumber`): keyed state is indexed by it. */
  readonly lin: number;
  readonly paused: boolean;
  readonly def: Rule;
  /** The rule's `on` types; `undefined` for every type (`"*"`). */
  readonly types: ReadonlySet<string> | undefined;
  /** Types the type index files the rule under: `on`, plus an absence rule's `expect.on`. */
  readonly indexTypes: readonly string[];
  /** Every type the index files the rule under triggers it (no absence `expect.on` beyond `on`). */
  readonly triggeredByIndex: boolean;
  readonly when: CompiledCondition | undefined;
  /**
   * Leaves whose falsity makes `when` false (see `guard-index.ts`), when the rule's verdict is
   * false whenever `when` is: `when` cannot throw on a plain event and no absence expectation
   * rides on the event.
   */
  readonly guard: readonly Guard[] | undefined;
  /** The fields of the rule's `key`; undefined when it is keyed by the partition key. */
  readonly keyFields: readonly string[] | undefined;
  /** The key space of `keyFields` (see `keySpaceOf`); undefined when keyed by the partition key. */
  readonly keySpace: string | undefined;
  readonly pattern: CompiledPattern | undefined;
  readonly severity: string;
  readonly title: (vars: (name: string) => unknown) => string;
  /** Event fields the title reads, kept with timer-driven state so the alert can be rendered later. */
  readonly titleFields: readonly string[];
  readonly suppressForMs: number;
  /** `stateTtl` in ms; 0: none. */
  readonly stateTtlMs: number;
}

/** The state lineage a rule version writes to: same id and epoch, same state. */
export function stateId(rule: Pick<CompiledRule, 'id' | 'stateEpoch'>): string {
  return `${rule.id}@${rule.stateEpoch}`;
}

const COMPARE: Record<Comparison, (a: number, b: number) => boolean> = {
  '>=': (a, b) => a >= b,
  '>': (a, b) => a > b,
  '<=': (a, b) => a <= b,
  '<': (a, b) => a < b,
  '==': (a, b) => a === b,
  '!=': (a, b) => a !== b,
};

const TEMPLATE_VAR = /\{\{\s*([^{}\s]+)\s*\}\}/g;

function compileTemplate(template: string): { render: CompiledRule['title']; fields: string[] } {
  const fields = [...template.matchAll(TEMPLATE_VAR)].map((m) => m[1] as string);
  return {
    fields,
    render: (vars) =>
      template.replace(TEMPLATE_VAR, (_, name: string) => {
        const v = vars(name);
        // Only scalars are rendered: an object or array renders as nothing, wherever the alert came from.
        return v === undefined || v === null || typeof v === 'object' ? '' : String(v);
      }),
  };
}

function compilePattern(rule: Rule): CompiledPattern | undefined {
  const p = rule.pattern;
  if (p === undefined) return undefined;
  switch (p.kind) {
    case 'threshold': {
      const cmp = COMPARE[p.operator];
      const value = p.value;
      return {
        kind: 'threshold',
        aggregate: p.aggregate,
        field: p.field,
        windowMs: parseDuration(p.window) ?? 0,
        tumbling: p.windowType === 'tumbling',
        compare: (a) => cmp(a, value),
      };
    }
    case 'sequence': {
      const referenced = new Set<string>();
      for (const s of p.steps)
        JSON.stringify(s.when ?? {}, (k, v: unknown) => {
          if (k === 'fact' && typeof v === 'string' && v.startsWith('step:'))
            referenced.add(v.slice(5));
          return v;
        });
      return {
        kind: 'sequence',
        withinMs: parseDuration(p.within) ?? 0,
        skipPastLast:
          (p.afterMatch ?? 'skip-past-last-event') ===
          ('skip-past-last-event' satisfies AfterMatch),
        steps: p.steps.map((s) => ({
          name: s.name,
          types: s.on === undefined || s.on.includes('*') ? undefined : new Set(s.on),
          when: s.when === undefined ? undefined : compileCondition(s.when),
          strict: (s.contiguity ?? 'followedBy') === ('next' satisfies Contiguity),
          times: s.times ?? 1,
          keepEvent: referenced.has(s.name),
        })),
      };
    }
    case 'absence':
      return {
        kind: 'absence',
        withinMs: parseDuration(p.within) ?? 0,
        expectTypes: new Set(p.expect.on),
        expectAny: p.expect.on.includes('*'),
        expectWhen: p.expect.when === undefined ? undefined : compileCondition(p.expect.when),
      };
  }
}

/** Compiles a validated rule at a given version and state epoch. */
export function compileRule(
  rule: Rule,
  version: number,
  stateEpoch: number,
  paused: boolean,
): CompiledRule {
  const title = compileTemplate(rule.alert?.title ?? rule.description ?? rule.id);
  const types = rule.on.includes('*') ? undefined : new Set(rule.on);
  const when = rule.when === undefined ? undefined : compileConditionInfo(rule.when);
  const indexTypes = [
    ...new Set([...rule.on, ...(rule.pattern?.kind === 'absence' ? rule.pattern.expect.on : [])]),
  ];
  return {
    id: rule.id,
    version,
    stateEpoch,
    sid: stateId({ id: rule.id, stateEpoch }),
    lin: lineageNumber(stateId({ id: rule.id, stateEpoch })),
    paused,
    def: rule,
    types,
    indexTypes,
    triggeredByIndex: types === undefined || indexTypes.every((t) => types.has(t)),
    when: when?.run,
    guard:
      when === undefined || when.throwsOnPlainEvents || rule.pattern?.kind === 'absence'
        ? undefined
        : conditionGuard(rule.when as TopCondition),
    keyFields: keyFieldsOf(rule.key),
    keySpace: rule.key === undefined ? undefined : keySpaceOf(keyFieldsOf(rule.key) ?? []),
    pattern: compilePattern(rule),
    severity: rule.alert?.severity ?? 'medium',
    title: title.render,
    titleFields: title.fields,
    suppressForMs: parseDuration(rule.alert?.suppressFor ?? 0) ?? 0,
    stateTtlMs: parseDuration(rule.stateTtl ?? 0) ?? 0,
  };
}

/** Compares two JSON values structurally (key order ignored). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every(
    (k) =>
      Object.hasOwn(b, k) &&
      jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
  );
}

/**
 * Why a new version of a rule cannot keep the old version's keyed state, or `undefined` when it
 * can. State survives changes to conditions, alert settings and a threshold's comparison; it is
 * reset when the key, the pattern kind, the window or the sequence changes.
 */
export function incompatibility(before: Rule, after: Rule): string | undefined {
  if (!sameKeyFields(before.key, after.key)) return 'key changed';
  const a = before.pattern;
  const b = after.pattern;
  if (a === undefined || b === undefined) return a === b ? undefined : 'pattern added or removed';
  if (a.kind !== b.kind) return 'pattern kind changed';
  if (a.kind === 'threshold' && b.kind === 'threshold') {
    if (a.aggregate !== b.aggregate || (a.field ?? null) !== (b.field ?? null))
      return 'aggregate changed';
    if (
      parseDuration(a.window) !== parseDuration(b.window) ||
      (a.windowType ?? 'sliding') !== (b.windowType ?? 'sliding')
    )
      return 'window changed';
    return undefined;
  }
  // Durations compare by value: "100ms" and 100 are the same window.
  const norm = (x: typeof a) => ('within' in x ? { ...x, within: parseDuration(x.within) } : x);
  return jsonEqual(norm(a), norm(b)) ? undefined : `${a.kind} pattern changed`;
}
