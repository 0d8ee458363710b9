import { pointer, type Problem } from './errors.js';
import { FORBIDDEN_NAMES, parsePath } from './json-path.js';
import type { RuleLimits } from './limits.js';
import { DECORATOR_NAMES, OPERATOR_NAMES, resolveOperator } from './operators.js';

/** What a condition tree refers to, gathered while validating it. */
export interface ConditionRefs {
  /** Model ids referenced as `model:<id>` facts. */
  readonly models: Set<string>;
  /** Lookup ids referenced as `list:<id>` facts. */
  readonly lists: Set<string>;
  /** Sequence step names referenced as `step:<name>` facts. */
  readonly steps: Set<string>;
}

export interface ConditionScope {
  readonly limits: RuleLimits;
  readonly problems: Problem[];
  readonly refs: ConditionRefs;
  /** Step names a `step:<name>` fact may name here (earlier steps of a sequence). */
  readonly stepNames: ReadonlySet<string>;
  /** Leaf conditions seen so far in the rule (shared across its trees). */
  leafCount: number;
  /** The rule's `on`, for checks of step types against it. */
  readonly ruleOn?: readonly string[] | undefined;
}

const BOOLEAN_KEYS = ['all', 'any', 'not'] as const;
const LEAF_KEYS = new Set(['fact', 'operator', 'value', 'path', 'params', 'priority', 'name']);
const FACT_NAME = /^(?:(model|list|step):)?([^:]+)$/;

export function newRefs(): ConditionRefs {
  return { models: new Set(), lists: new Set(), steps: new Set() };
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Validates the root of a condition tree (`all`, `any` or `not`, as json-rules-engine requires),
 * appending every problem to `scope.problems`.
 */
export function validateTopCondition(value: unknown, at: string, scope: ConditionScope): void {
  if (!isPlainObject(value) || !BOOLEAN_KEYS.some((k) => Object.hasOwn(value, k))) {
    scope.problems.push({
      pointer: at,
      message:
        'a condition tree must be an object whose root is "all", "any" or "not", e.g. {"all": [{"fact": "amount", "operator": "greaterThan", "value": 100}]}',
    });
    return;
  }
  validateCondition(value, at, scope, 1);
}

function validatePriority(node: Record<string, unknown>, at: string, scope: ConditionScope): void {
  if (!Object.hasOwn(node, 'priority')) return;
  const p = node.priority;
  if (typeof p !== 'number' || !Number.isSafeInteger(p) || p < 1) {
    scope.problems.push({
      pointer: pointer(at, 'priority'),
      message: `priority must be a positive integer (higher runs first), got ${JSON.stringify(p)}`,
    });
  }
  if (Object.hasOwn(node, 'name') && typeof node.name !== 'string') {
    scope.problems.push({ pointer: pointer(at, 'name'), message: 'name must be a string' });
  }
}

function validateCondition(value: unknown, at: string, scope: ConditionScope, depth: number): void {
  if (!isPlainObject(value)) {
    scope.problems.push({
      pointer: at,
      message:
        'a condition must be an object: {"all": [...]}, {"any": [...]}, {"not": {...}} or {"fact", "operator", "value"}',
    });
    return;
  }
  const booleans = BOOLEAN_KEYS.filter((k) => Object.hasOwn(value, k));
  if (Object.hasOwn(value, 'condition')) {
    scope.problems.push({
      pointer: pointer(at, 'condition'),
      message: 'shared condition references are not supported; write the condition inline',
    });
    return;
  }
  if (booleans.length > 1) {
    scope.problems.push({
      pointer: at,
      message: `a condition may hold only one of "all", "any", "not" (found ${booleans.join(', ')}); json-rules-engine would silently ignore all but one, so nest them instead`,
    });
    return;
  }
  validatePriority(value, at, scope);
  const op = booleans[0];
  if (op !== undefined) {
    if (depth > scope.limits.maxConditionDepth) {
      scope.problems.push({
        pointer: at,
        message: `conditions are nested deeper than the limit of ${scope.limits.maxConditionDepth}; flatten the tree`,
      });
      return;
    }
    const extra = Object.keys(value).filter((k) => k !== op && k !== 'priority' && k !== 'name');
    if (extra.length > 0) {
      scope.problems.push({
        pointer: at,
        message: `a "${op}" condition cannot also have ${extra.map((k) => `"${k}"`).join(', ')}; move them into a nested condition`,
      });
    }
    const children = value[op];
    if (op === 'not') {
      if (!isPlainObject(children)) {
        scope.problems.push({
          pointer: pointer(at, op),
          message: '"not" takes one condition object, not an array',
        });
        return;
      }
      validateCondition(children, pointer(at, op), scope, depth + 1);
      return;
    }
    if (!Array.isArray(children)) {
      scope.problems.push({
        pointer: pointer(at, op),
        message: `"${op}" must be an array of conditions`,
      });
      return;
    }
    children.forEach((c, i) => validateCondition(c, pointer(at, op, i), scope, depth + 1));
    return;
  }
  validateLeaf(value, at, scope);
}

function validateFactName(fact: unknown, at: string, scope: ConditionScope): boolean {
  if (typeof fact !== 'string' || fact.length === 0) {
    scope.problems.push({
      pointer: at,
      message:
        'fact must be a non-empty string: an event field, "model:<id>", "list:<id>" or "step:<name>"',
    });
    return false;
  }
  const m = FACT_NAME.exec(fact);
  if (!m || m[2] === undefined) {
    scope.problems.push({
      pointer: at,
      message: `fact "${fact}" is not valid: use an event field name, or "model:<id>", "list:<id>", "step:<name>"`,
    });
    return false;
  }
  const [, prefix, name] = m;
  if (FORBIDDEN_NAMES.has(name)) {
    scope.problems.push({
      pointer: at,
      message: `fact "${fact}" names "${name}", which is not allowed; rename the field`,
    });
    return false;
  }
  if (prefix === 'model') scope.refs.models.add(name);
  else if (prefix === 'list') scope.refs.lists.add(name);
  else if (prefix === 'step') {
    if (!scope.stepNames.has(name)) {
      scope.problems.push({
        pointer: at,
        message: `fact "${fact}" names no earlier step; a step may refer only to steps before it (${[...scope.stepNames].join(', ') || 'none here'})`,
      });
      return false;
    }
    scope.refs.steps.add(name);
  }
  return true;
}

function validateParams(params: unknown, at: string, fact: unknown, scope: ConditionScope): void {
  if (!isPlainObject(params)) {
    scope.problems.push({ pointer: at, message: 'params must be an object' });
    return;
  }
  for (const k of Object.keys(params)) {
    if (FORBIDDEN_NAMES.has(k))
      scope.problems.push({ pointer: pointer(at, k), message: `params may not name "${k}"` });
  }
  if (typeof fact === 'string' && fact.startsWith('list:') && Object.hasOwn(params, 'key')) {
    const key = params.key;
    if (typeof key !== 'string' || key.length === 0 || FORBIDDEN_NAMES.has(key)) {
      scope.problems.push({
        pointer: pointer(at, 'key'),
        message:
          'params.key of a list fact must name the event field to look up, e.g. {"key": "cardId"}',
      });
    }
  }
}

function validateFactRef(node: Record<string, unknown>, at: string, scope: ConditionScope): void {
  validateFactName(node.fact, pointer(at, 'fact'), scope);
  if (Object.hasOwn(node, 'path') && node.path !== undefined) {
    if (typeof node.path !== 'string') {
      scope.problems.push({
        pointer: pointer(at, 'path'),
        message: 'path must be a string such as "$.address.country"',
      });
    } else {
      const parsed = parsePath(node.path);
      if (!parsed.ok)
        scope.problems.push({ pointer: pointer(at, 'path'), message: parsed.message });
    }
  }
  if (Object.hasOwn(node, 'params') && node.params !== undefined) {
    validateParams(node.params, pointer(at, 'params'), node.fact, scope);
  }
}

function validateLiteral(value: unknown, at: string, scope: ConditionScope): void {
  if (Array.isArray(value)) {
    if (value.length > scope.limits.maxValueArrayLength) {
      scope.problems.push({
        pointer: at,
        message: `value has ${value.length} items, over the limit of ${scope.limits.maxValueArrayLength}; use a lookup table ("list:<id>") instead`,
      });
    }
    value.forEach((v, i) => {
      if (typeof v === 'number' && !Number.isFinite(v)) {
        scope.problems.push({
          pointer: pointer(at, i),
          message: 'numbers in a value must be finite (JSON has no NaN or Infinity)',
        });
      } else if (typeof v === 'object' && v !== null) {
        scope.problems.push({
          pointer: pointer(at, i),
          message:
            'items of a value array must be strings, numbers, booleans or null (objects never compare equal)',
        });
      }
    });
    return;
  }
  if (typeof value === 'number' && !Number.isFinite(value)) {
    scope.problems.push({
      pointer: at,
      message: 'value must be a finite number (JSON has no NaN or Infinity)',
    });
  }
  if (typeof value === 'object' && value !== null) {
    scope.problems.push({
      pointer: at,
      message:
        'value must be a string, number, boolean, null, an array of those, or a fact reference {"fact": "..."}; a literal object never compares equal to anything',
    });
  }
}

function validateLeaf(node: Record<string, unknown>, at: string, scope: ConditionScope): void {
  scope.leafCount++;
  if (scope.leafCount === scope.limits.maxConditions + 1) {
    scope.problems.push({
      pointer: at,
      message: `the rule has more than ${scope.limits.maxConditions} conditions; split it or use a lookup table`,
    });
  }
  for (const k of ['fact', 'operator', 'value'] as const) {
    if (!Object.hasOwn(node, k)) {
      scope.problems.push({
        pointer: at,
        message: `a condition needs "fact", "operator" and "value"; "${k}" is missing`,
      });
      return;
    }
  }
  const unknown = Object.keys(node).filter((k) => !LEAF_KEYS.has(k));
  if (unknown.length > 0) {
    scope.problems.push({
      pointer: pointer(at, unknown[0] as string),
      message: `unknown condition property "${unknown[0]}"; a condition has fact, operator, value, path, params, priority and name`,
    });
  }
  validateFactRef(node, at, scope);
  const opName = node.operator;
  const op = typeof opName === 'string' ? resolveOperator(opName) : undefined;
  if (op === undefined) {
    const near = typeof opName === 'string' ? nearestOperator(opName) : undefined;
    scope.problems.push({
      pointer: pointer(at, 'operator'),
      message: `unknown operator ${JSON.stringify(opName)}${near === undefined ? '' : ` (did you mean ${near}?)`}; use one of ${OPERATOR_NAMES.join(', ')}, optionally prefixed by decorators ${DECORATOR_NAMES.map((d) => `${d}:`).join(', ')}`,
    });
  }
  const value = node.value;
  const valueAt = pointer(at, 'value');
  const isRef = typeof value === 'object' && value !== null && Object.hasOwn(value, 'fact');
  if (isRef) {
    const ref = value as Record<string, unknown>;
    const extra = Object.keys(ref).filter((k) => k !== 'fact' && k !== 'path' && k !== 'params');
    if (extra.length > 0)
      scope.problems.push({
        pointer: valueAt,
        message: `a fact reference has only fact, path and params; remove ${extra.map((k) => `"${k}"`).join(', ')}`,
      });
    validateFactRef(ref, valueAt, scope);
    return;
  }
  validateLiteral(value, valueAt, scope);
  if (op === undefined) return;
  // Refuse at validation what json-rules-engine would only fail on at run time.
  const first = op.decorators[0];
  const valueIsList = Array.isArray(value) || typeof value === 'string';
  if ((first === 'someValue' || first === 'everyValue') && !Array.isArray(value)) {
    scope.problems.push({
      pointer: valueAt,
      message: `operator "${op.name}" needs an array value; json-rules-engine throws on anything else`,
    });
  } else if (
    op.decorators.length === 0 &&
    (op.base === 'in' || op.base === 'notIn') &&
    !valueIsList
  ) {
    scope.problems.push({
      pointer: valueAt,
      message: `operator "${op.name}" needs an array (or a string, for a substring test) as value; json-rules-engine throws on anything else`,
    });
  }
}

/** Edit distance (insertions, deletions, substitutions), case-insensitive. */
function distance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  let prev = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const cur = [i];
    for (let j = 1; j <= y.length; j++)
      cur[j] = Math.min(
        (prev[j] as number) + 1,
        (cur[j - 1] as number) + 1,
        (prev[j - 1] as number) + (x[i - 1] === y[j - 1] ? 0 : 1),
      );
    prev = cur;
  }
  return prev[y.length] as number;
}

/**
 * The operator (with the decorators given, kept as they are) nearest to a misspelt one, when one
 * is near enough to be a likely typo: at most a third of its letters off.
 */
function nearestOperator(name: string): string | undefined {
  const cut = name.lastIndexOf(':');
  const prefix = name.slice(0, cut + 1);
  const base = name.slice(cut + 1);
  let best: string | undefined;
  let bestD = Infinity;
  for (const op of OPERATOR_NAMES) {
    const d = distance(base, op);
    if (d < bestD) {
      bestD = d;
      best = op;
    }
  }
  return best !== undefined && bestD <= Math.max(1, Math.floor(best.length / 3))
    ? `${prefix}${best}`
    : undefined;
}
