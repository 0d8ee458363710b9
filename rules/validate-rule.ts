import { pointer, type Problem } from './errors.js';
import { parseDuration } from './duration.js';
import { FORBIDDEN_NAMES } from './json-path.js';
import type { RuleLimits } from './limits.js';
import { validateIdAndDescription } from './models.js';
import type { Rule } from './types.js';
import {
  newRefs,
  validateTopCondition,
  type ConditionRefs,
  type ConditionScope,
} from './validate-condition.js';
import { isObject, nonEmptyArrayAt, objectAt } from './validate-json.js';

const RULE_KEYS = new Set([
  'id',
  'description',
  'on',
  'key',
  'when',
  'pattern',
  'alert',
  'stateTtl',
]);
const COMPARISONS = ['>=', '>', '<=', '<', '==', '!='];
const AGGREGATES = ['count', 'sum', 'avg', 'min', 'max', 'distinct'];
const STEP_NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,63}$/;
const FIELD = /^[^:]+$/;

/** Reports every key of `o` that is not in `known`: a misspelt setting must not be silently ignored. */
function unknownKeys(
  o: Record<string, unknown>,
  known: readonly string[],
  at: string,
  what: string,
  problems: Problem[],
): void {
  for (const k of Object.keys(o)) {
    if (!known.includes(k))
      problems.push({
        pointer: pointer(at, k),
        message: `unknown property "${k}" in ${what}; ${what} has ${known.join(', ')}`,
      });
  }
}

function validateField(v: unknown, at: string, what: string, problems: Problem[]): v is string {
  if (typeof v !== 'string' || v.length === 0 || !FIELD.test(v) || FORBIDDEN_NAMES.has(v)) {
    problems.push({
      pointer: at,
      message: `${what} must name a top-level event field (a non-empty string without ":" that is not __proto__, constructor or prototype)`,
    });
    return false;
  }
  return true;
}

/** The most fields a composite key may name. */
const MAX_KEY_FIELDS = 8;

/** `key`: one field, or a list of 1-8 distinct fields (a composite key). */
function validateKey(v: unknown, at: string, problems: Problem[]): void {
  if (!Array.isArray(v)) {
    validateField(v, at, 'key', problems);
    return;
  }
  if (v.length === 0 || v.length > MAX_KEY_FIELDS) {
    problems.push({
      pointer: at,
      message: `key as a list must name 1 to ${MAX_KEY_FIELDS} fields, e.g. ["payer", "beneficiary"]; it names ${v.length}`,
    });
    return;
  }
  v.forEach((f, i) => {
    if (!validateField(f, pointer(at, String(i)), 'each field of key', problems)) return;
    if (v.indexOf(f) !== i)
      problems.push({
        pointer: pointer(at, String(i)),
        message: `key names the field "${f}" twice; name each field once`,
      });
  });
}

function validateDuration(
  v: unknown,
  at: string,
  what: string,
  limits: RuleLimits,
  problems: Problem[],
  allowZero = false,
): void {
  const ms = parseDuration(v);
  if (ms === undefined || (!allowZero && ms === 0)) {
    problems.push({
      pointer: at,
      message: `${what} must be a duration such as "30s", "10m", "2h", "1d" or a number of milliseconds${allowZero ? '' : ' greater than 0'}`,
    });
  } else if (ms > limits.maxWindowMs) {
    problems.push({
      pointer: at,
      message: `${what} of ${ms} ms is over the limit of ${limits.maxWindowMs} ms`,
    });
  }
}

function validateTypes(v: unknown, at: string, what: string, problems: Problem[]): void {
  if (
    !Array.isArray(v) ||
    v.length === 0 ||
    !v.every((t) => typeof t === 'string' && t.length > 0)
  ) {
    problems.push({
      pointer: at,
      message: `${what} must be a non-empty array of event types, e.g. ["payment"] (or ["*"] for every type)`,
    });
  }
}

function validateThreshold(
  p: Record<string, unknown>,
  at: string,
  limits: RuleLimits,
  problems: Problem[],
): void {
  if (!AGGREGATES.includes(p.aggregate as string)) {
    problems.push({
      pointer: pointer(at, 'aggregate'),
      message: `aggregate must be one of ${AGGREGATES.join(', ')}`,
    });
  } else if (p.aggregate !== 'count') {
    validateField(
      p.field,
      pointer(at, 'field'),
      `aggregate "${String(p.aggregate)}" needs "field", which`,
      problems,
    );
  }
  validateDuration(p.window, pointer(at, 'window'), 'window', limits, problems);
  if (p.windowType !== undefined && p.windowType !== 'sliding' && p.windowType !== 'tumbling') {
    problems.push({
      pointer: pointer(at, 'windowType'),
      message: 'windowType must be "sliding" (default) or "tumbling"',
    });
  }
  if (!COMPARISONS.includes(p.operator as string))
    problems.push({
      pointer: pointer(at, 'operator'),
      message: `operator must be one of ${COMPARISONS.join(' ')}`,
    });
  if (typeof p.value !== 'number' || !Number.isFinite(p.value))
    problems.push({
      pointer: pointer(at, 'value'),
      message: 'value must be a finite number to compare the aggregate with',
    });
}

function validateSequence(
  p: Record<string, unknown>,
  at: string,
  scope: ConditionScope,
  problems: Problem[],
): void {
  const limits = scope.limits;
  validateDuration(p.within, pointer(at, 'within'), 'within', limits, problems);
  if (
    p.afterMatch !== undefined &&
    p.afterMatch !== 'skip-past-last-event' &&
    p.afterMatch !== 'no-skip'
  ) {
    problems.push({
      pointer: pointer(at, 'afterMatch'),
      message: 'afterMatch must be "skip-past-last-event" (default) or "no-skip"',
    });
  }
  const steps = p.steps;
  const stepsMessage =
    'steps must be a non-empty array of {"name", "when"?, "on"?, "contiguity"?, "times"?}';
  if (!nonEmptyArrayAt(steps, pointer(at, 'steps'), stepsMessage, problems)) return;
  if (steps.length > limits.maxSteps)
    problems.push({
      pointer: pointer(at, 'steps'),
      message: `a sequence may have at most ${limits.maxSteps} steps`,
    });
  const earlier = new Set<string>();
  // Steps may refer to the steps before them; `earlier` grows as the loop goes.
  const sub: ConditionScope = { ...scope, stepNames: earlier };
  steps.forEach((s: unknown, i) => {
    const sat = pointer(at, 'steps', i);
    if (!objectAt(s, sat, 'a step must be an object with a "name"', problems)) return;
    const unknown = Object.keys(s).filter(
      (k) => !['name', 'on', 'when', 'contiguity', 'times'].includes(k),
    );
    if (unknown.length > 0)
      problems.push({
        pointer: pointer(sat, unknown[0] as string),
        message: `unknown step property "${unknown[0]}"; a step has name, on, when, contiguity and times`,
      });
    const name = s.name;
    if (typeof name !== 'string' || !STEP_NAME.test(name)) {
      problems.push({
        pointer: pointer(sat, 'name'),
        message:
          'name must start with a letter or "_" and hold only letters, digits, "_" or "-" (at most 64)',
      });
    } else if (earlier.has(name)) {
      problems.push({
        pointer: pointer(sat, 'name'),
        message: `step name "${name}" is used twice; names must be unique`,
      });
    }
    if (s.on !== undefined) {
      validateTypes(s.on, pointer(sat, 'on'), 'on', problems);
      const outside =
        Array.isArray(s.on) && Array.isArray(scope.ruleOn) && !scope.ruleOn.includes('*')
          ? s.on.filter((t) => !scope.ruleOn?.includes(t as string))
          : [];
      if (outside.length > 0)
        problems.push({
          pointer: pointer(sat, 'on'),
          message: `step types ${JSON.stringify(outside)} are not in the rule's "on", so the step could never match; add them to the rule's "on"`,
        });
    }
    if (s.when !== undefined) validateTopCondition(s.when, pointer(sat, 'when'), sub);
    if (s.contiguity !== undefined && s.contiguity !== 'next' && s.contiguity !== 'followedBy') {
      problems.push({
        pointer: pointer(sat, 'contiguity'),
        message:
          'contiguity must be "next" (strict: the very next event) or "followedBy" (relaxed, default)',
      });
    }
    if (
      s.times !== undefined &&
      (typeof s.times !== 'number' ||
        !Number.isSafeInteger(s.times) ||
        s.times < 1 ||
        s.times > limits.maxTimes)
    ) {
      problems.push({
        pointer: pointer(sat, 'times'),
        message: `times must be an integer from 1 to ${limits.maxTimes}`,
      });
    }
    if (typeof name === 'string') earlier.add(name);
  });
  scope.leafCount = sub.leafCount;
  // Bounds the events one partial match holds, and so the work one event can cause.
  const total = steps.reduce(
    (n: number, s: unknown) => n + (isObject(s) && typeof s.times === 'number' ? s.times : 1),
    0,
  );
  if (total > limits.maxTimes)
    problems.push({
      pointer: pointer(at, 'steps'),
      message: `a match would hold ${total} events (the sum of every step's times), over the limit of ${limits.maxTimes}`,
    });
}

function validatePattern(p: unknown, at: string, scope: ConditionScope, problems: Problem[]): void {
  const kinds = 'pattern must be an object with "kind": "threshold", "sequence" or "absence"';
  if (!objectAt(p, at, kinds, problems)) return;
  switch (p.kind) {
    case 'threshold':
      unknownKeys(
        p,
        ['kind', 'aggregate', 'field', 'window', 'windowType', 'operator', 'value'],
        at,
        'a threshold pattern',
        problems,
      );
      validateThreshold(p, at, scope.limits, problems);
      break;
    case 'sequence':
      unknownKeys(p, ['kind', 'steps', 'within', 'afterMatch'], at, 'a sequence pattern', problems);
      validateSequence(p, at, scope, problems);
      break;
    case 'absence': {
      unknownKeys(p, ['kind', 'within', 'expect'], at, 'an absence pattern', problems);
      validateDuration(p.within, pointer(at, 'within'), 'within', scope.limits, problems);
      const expect = p.expect;
      const expectMessage =
        'expect must be an object {"on": [types], "when"?: condition} describing the event that must follow';
      if (!objectAt(expect, pointer(at, 'expect'), expectMessage, problems)) break;
      unknownKeys(
        expect,
        ['on', 'when'],
        pointer(at, 'expect'),
        "an absence pattern's expect",
        problems,
      );
      validateTypes(expect.on, pointer(at, 'expect', 'on'), 'expect.on', problems);
      if (expect.when !== undefined)
        validateTopCondition(expect.when, pointer(at, 'expect', 'when'), scope);
      break;
    }
    default:
      problems.push({
        pointer: pointer(at, 'kind'),
        message: `pattern kind must be "threshold", "sequence" or "absence", got ${JSON.stringify(p.kind)}`,
      });
  }
}

function validateAlert(a: unknown, at: string, limits: RuleLimits, problems: Problem[]): void {
  const alertMessage = 'alert must be an object {"severity"?, "title"?, "suppressFor"?}';
  if (!objectAt(a, at, alertMessage, problems)) return;
  if (
    a.severity !== undefined &&
    (typeof a.severity !== 'string' || !/^[a-z0-9_-]{1,32}$/.test(a.severity))
  ) {
    problems.push({
      pointer: pointer(at, 'severity'),
      message:
        'severity must be one subject token of lowercase letters, digits, "_" or "-", e.g. "high"',
    });
  }
  unknownKeys(a, ['severity', 'title', 'suppressFor'], at, "a rule's alert", problems);
  if (typeof a.title === 'string' && a.title.length > 1000)
    problems.push({
      pointer: pointer(at, 'title'),
      message: 'title must be at most 1000 characters',
    });
  if (a.title !== undefined && typeof a.title !== 'string')
    problems.push({
      pointer: pointer(at, 'title'),
      message: 'title must be a string; "{{field}}" inserts an event field',
    });
  if (a.suppressFor !== undefined)
    validateDuration(
      a.suppressFor,
      pointer(at, 'suppressFor'),
      'suppressFor',
      limits,
      problems,
      true,
    );
}

/** A rule that passed validation, with what its conditions refer to. */
export interface ValidatedRule {
  readonly rule: Rule;
  readonly refs: ConditionRefs;
}

/**
 * Validates a rule's shape and limits (not its references to models, which depend on the rule
 * set: see `applyControl`). Appends every problem; returns the rule when there was none.
 */
export function validateRule(
  rule: unknown,
  at: string,
  limits: RuleLimits,
  problems: Problem[],
): ValidatedRule | undefined {
  const before = problems.length;
  if (!objectAt(rule, at, 'a rule must be an object with at least "id" and "on"', problems))
    return undefined;
  for (const k of Object.keys(rule)) {
    if (!RULE_KEYS.has(k))
      problems.push({
        pointer: pointer(at, k),
        message: `unknown rule property "${k}"; a rule has ${[...RULE_KEYS].join(', ')}`,
      });
  }
  validateIdAndDescription(rule, at, problems);
  validateTypes(rule.on, pointer(at, 'on'), 'on', problems);
  if (rule.key !== undefined) validateKey(rule.key, pointer(at, 'key'), problems);
  const refs = newRefs();
  const scope: ConditionScope = {
    limits,
    problems,
    refs,
    stepNames: new Set(),
    leafCount: 0,
    ruleOn: Array.isArray(rule.on) ? (rule.on as string[]) : undefined,
  };
  if (rule.when !== undefined) validateTopCondition(rule.when, pointer(at, 'when'), scope);
  if (rule.pattern !== undefined)
    validatePattern(rule.pattern, pointer(at, 'pattern'), scope, problems);
  if (rule.when === undefined && rule.pattern === undefined) {
    problems.push({
      pointer: at,
      message:
        'a rule needs "when" (a condition), "pattern", or both; without either it would fire on every event',
    });
  }
  if (rule.alert !== undefined) validateAlert(rule.alert, pointer(at, 'alert'), limits, problems);
  if (rule.stateTtl !== undefined)
    validateDuration(rule.stateTtl, pointer(at, 'stateTtl'), 'stateTtl', limits, problems);
  return problems.length === before ? { rule: rule as unknown as Rule, refs } : undefined;
}
