import { parsePath, resolveSegments } from './json-path.js';
import { lookupFact, type ModelRegistry } from './models.js';
import { isNumeric, resolveOperator } from './operators.js';
import type { Condition, TopCondition } from './types.js';

/** What a compiled condition reads: the event's fields, the models in force, earlier steps' events. */
export interface EvalContext {
  readonly event: Readonly<Record<string, unknown>>;
  readonly models: ModelRegistry;
  /** Events of earlier sequence steps, by step name (facts `step:<name>`). */
  steps: Readonly<Record<string, unknown>> | undefined;
  /** Model scores computed for this event, so each model runs at most once per event. */
  scores: Map<string, number> | undefined;
  /**
   * The event holds a hostile object (see {@link hasHostileObject}):
   * converting one of its values to a primitive may throw, so conditions are evaluated exhaustively.
   */
  readonly hostile: boolean;
}

/**
 * Creates the context for judging one event. `hostile` is {@link hasHostileObject} of the event;
 * pass it when already known (event parsing computes it), otherwise it is computed here.
 */
export function evalContext(
  event: Readonly<Record<string, unknown>>,
  models: ModelRegistry,
  hostile: boolean = hasHostileObject(event),
): EvalContext {
  return { event, models, steps: undefined, scores: undefined, hostile };
}

/**
 * True when `value` is or holds (at any depth) a hostile object (see {@link isHostileObject}).
 * Those are the only values on which a JS conversion to a primitive can throw (`parseFloat`, `<`,
 * `String.prototype.indexOf`): any other object converts through `Object.prototype.toString`,
 * and every array through `join` of convertible elements.
 */
export function hasHostileObject(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  if (Array.isArray(value)) {
    for (const x of value) if (hasHostileObject(x)) return true;
    return false;
  }
  if (isHostileObject(value)) return true;
  for (const k in value) {
    if (hasHostileObject((value as Record<string, unknown>)[k])) return true;
  }
  return false;
}

/**
 * An object (not an array) whose conversion to a primitive may throw: it has an own `toString`
 * or `valueOf` field, or was not made by JSON.parse (another prototype, e.g. `Object.create(null)`).
 */
export function isHostileObject(value: object): boolean {
  return (
    Object.getPrototypeOf(value) !== Object.prototype ||
    Object.hasOwn(value, 'toString') ||
    Object.hasOwn(value, 'valueOf')
  );
}

/** A compiled condition: true or false, or throws where json-rules-engine's run would reject. */
export type CompiledCondition = (ctx: EvalContext) => boolean;

/**
 * When a condition can throw, which decides whether a group may short-circuit without hiding an
 * error json-rules-engine would raise (it evaluates a whole priority group, `Promise.all`).
 */
const Risk = {
  /** Never throws. */
  never: 0,
  /** Throws only on a hostile value (see {@link hasHostileObject}): short-circuit unless the event is hostile. */
  hostile: 1,
  /** May throw on ordinary values too (fact references, decorators, lookups): always exhaustive. */
  always: 2,
} as const;
type Risk = (typeof Risk)[keyof typeof Risk];

interface Node {
  readonly run: CompiledCondition;
  readonly priority: number;
  readonly risk: Risk;
}

const maxRisk = (nodes: readonly Node[]): Risk =>
  nodes.reduce<Risk>((r, n) => (n.risk > r ? n.risk : r), Risk.never);

type FactFn = (ctx: EvalContext) => unknown;

function modelScore(ctx: EvalContext, id: string): unknown {
  const cached = ctx.scores?.get(id);
  if (cached !== undefined) return cached;
  const m = ctx.models.get(id);
  if (m === undefined || m.kind !== 'scorer') return undefined;
  const s = m.score(ctx.event);
  (ctx.scores ??= new Map()).set(id, s);
  return s;
}

/** Compiles a fact reference (fact + params + path) into a function, as json-rules-engine's almanac resolves it. */
function compileFact(
  fact: string,
  params: Readonly<Record<string, unknown>> | undefined,
  path: string | undefined,
): FactFn {
  let base: FactFn;
  const colon = fact.indexOf(':');
  const prefix = colon > 0 ? fact.slice(0, colon) : '';
  const name = colon > 0 ? fact.slice(colon + 1) : fact;
  if (prefix === 'model') base = (ctx) => modelScore(ctx, name);
  else if (prefix === 'list') {
    const key = typeof params?.key === 'string' ? params.key : undefined;
    base = (ctx) => {
      const m = ctx.models.get(name);
      return m === undefined ? undefined : lookupFact(m, ctx.event, key);
    };
  } else if (prefix === 'step')
    base = (ctx) =>
      ctx.steps !== undefined && Object.hasOwn(ctx.steps, name) ? ctx.steps[name] : undefined;
  else base = (ctx) => (Object.hasOwn(ctx.event, fact) ? ctx.event[fact] : undefined);
  if (!path) return base;
  const parsed = parsePath(path);
  if (!parsed.ok) throw new Error(parsed.message); // validation refuses this first
  const segments = parsed.segments;
  // The almanac applies a path only to object-like values; any other value passes through unchanged.
  return (ctx) => {
    const v = base(ctx);
    return v !== null && typeof v === 'object' ? resolveSegments(v, segments) : v;
  };
}

function isFactRef(
  value: unknown,
): value is { fact: string; path?: string; params?: Record<string, unknown> } {
  return typeof value === 'object' && value !== null && Object.hasOwn(value, 'fact');
}

function compileLeaf(c: {
  fact: string;
  operator: string;
  value: unknown;
  path?: string;
  params?: Record<string, unknown>;
  priority?: number;
}): Node {
  const op = resolveOperator(c.operator);
  if (op === undefined) throw new Error(`unknown operator ${c.operator}`); // validation refuses this first
  const evaluate = op.evaluate;
  const left = compileFact(c.fact, c.params, c.path);
  const priority = c.priority ?? 1;
  const value = c.value;
  if (isFactRef(value)) {
    const right = compileFact(value.fact, value.params, value.path);
    // Set membership instead of indexOf for `in`/`notIn` against a lookup set: same answer, O(1).
    if (
      op.decorators.length === 0 &&
      (op.base === 'in' || op.base === 'notIn') &&
      value.fact.startsWith('list:') &&
      !value.path &&
      value.params?.key === undefined
    ) {
      const id = value.fact.slice(5);
      const negate = op.base === 'notIn';
      return {
        priority,
        risk: Risk.always,
        run: (ctx) => {
          const m = ctx.models.get(id);
          if (m !== undefined && m.kind === 'set') return m.set.has(left(ctx)) !== negate;
          return evaluate(left(ctx), right(ctx));
        },
      };
    }
    return { priority, risk: Risk.always, run: (ctx) => evaluate(left(ctx), right(ctx)) };
  }
  const risk = literalRisk(op.base, op.decorators.length > 0, c.fact, value);
  if (op.decorators.length === 0 && !c.path && c.fact.indexOf(':') <= 0) {
    const run = plainFieldLeaf(op.base, c.fact, value);
    if (run !== undefined) return { priority, risk, run };
  }
  if (
    op.decorators.length === 0 &&
    (op.base === 'in' || op.base === 'notIn') &&
    Array.isArray(value) &&
    value.length > 8
  ) {
    const set = new Set(value);
    const negate = op.base === 'notIn';
    return { priority, risk: Risk.never, run: (ctx) => set.has(left(ctx)) !== negate };
  }
  return { priority, risk, run: (ctx) => evaluate(left(ctx), value) };
}

/**
 * An undecorated operator on a plain event field with a literal value, as one closure: the hot
 * case (most leaves are `amount > 5000` or `country in [...]`), which the generic path spreads
 * over four calls (leaf, fact, validator, comparison). Same semantics as `operators.ts`.
 */
function plainFieldLeaf(base: string, fact: string, value: unknown): CompiledCondition | undefined {
  // Facts resolve as own properties only; a name Object.prototype also has needs the check.
  if (fact in Object.prototype) return undefined;
  const v = value as number; // compared with JS coercion, whatever its type, as json-rules-engine does
  switch (base) {
    case 'equal':
      return (ctx) => ctx.event[fact] === value;
    case 'notEqual':
      return (ctx) => ctx.event[fact] !== value;
    case 'lessThan':
      return (ctx) => {
        const a = ctx.event[fact] as number;
        return (typeof a === 'number' ? a === a : isNumeric(a)) && a < v;
      };
    case 'lessThanInclusive':
      return (ctx) => {
        const a = ctx.event[fact] as number;
        return (typeof a === 'number' ? a === a : isNumeric(a)) && a <= v;
      };
    case 'greaterThan':
      return (ctx) => {
        const a = ctx.event[fact] as number;
        return (typeof a === 'number' ? a === a : isNumeric(a)) && a > v;
      };
    case 'greaterThanInclusive':
      return (ctx) => {
        const a = ctx.event[fact] as number;
        return (typeof a === 'number' ? a === a : isNumeric(a)) && a >= v;
      };
    case 'in':
    case 'notIn': {
      if (!Array.isArray(value) && typeof value !== 'string') return undefined; // throws: keep the generic path
      const hay = value as { indexOf(x: unknown): number };
      return base === 'in'
        ? (ctx) => hay.indexOf(ctx.event[fact]) > -1
        : (ctx) => hay.indexOf(ctx.event[fact]) === -1;
    }
    default:
      return undefined;
  }
}

/**
 * The risk of a leaf with a literal value. Event fields and model scores (numbers) throw only when
 * hostile; lookups and step references bring values the event scan does not cover.
 */
function literalRisk(base: string, decorated: boolean, fact: string, value: unknown): Risk {
  if (decorated || fact.startsWith('list:') || fact.startsWith('step:')) {
    // `indexOf` on an array never converts its argument, `===` never converts at all.
    const safe =
      !decorated &&
      (base === 'equal' ||
        base === 'notEqual' ||
        base === 'contains' ||
        base === 'doesNotContain' ||
        ((base === 'in' || base === 'notIn') && Array.isArray(value)));
    return safe ? Risk.never : Risk.always;
  }
  switch (base) {
    case 'equal':
    case 'notEqual':
    case 'contains': // validator Array.isArray, then indexOf on the array: no conversion
    case 'doesNotContain':
      return Risk.never;
    case 'in':
    case 'notIn':
      // On an array, indexOf does not convert; on a string it converts the fact; anything else has no indexOf.
      return Array.isArray(value)
        ? Risk.never
        : typeof value === 'string'
          ? Risk.hostile
          : Risk.always;
    default:
      // Numeric: parseFloat converts the fact, then `<` converts both sides.
      return hasHostileObject(value) ? Risk.always : Risk.hostile;
  }
}

/**
 * Evaluates children as json-rules-engine's prioritizeAndRun does: groups by priority, highest
 * first, short-circuiting between groups. Inside a group json-rules-engine evaluates every
 * condition (Promise.all), so an error anywhere in the group rejects the run; we short-circuit
 * inside a group only when no condition in it can throw on this event.
 */
function compileGroup(children: readonly Node[], isAll: boolean): CompiledCondition {
  if (children.length === 0) return () => true;
  if (children.length === 1) return (children[0] as Node).run;
  const byPriority = new Map<number, Node[]>();
  for (const c of children) {
    const group = byPriority.get(c.priority) ?? [];
    group.push(c);
    byPriority.set(c.priority, group);
  }
  const sets = [...byPriority.entries()]
    .sort((a, b) => b[0] - a[0])
    .map(([, nodes]) => groupSet(nodes, isAll));
  if (sets.length === 1) return sets[0] as CompiledCondition;
  return (ctx) => {
    for (const run of sets) {
      const v = run(ctx);
      if (isAll ? !v : v) return v;
    }
    return isAll;
  };
}

/** One priority group: short-circuits while no member can throw, else evaluates every member. */
function groupSet(nodes: readonly Node[], isAll: boolean): CompiledCondition {
  const runs = nodes.map((n) => n.run);
  const n = runs.length;
  const risk = maxRisk(nodes);
  const exhaustive = (ctx: EvalContext): boolean => {
    let result = isAll;
    for (let i = 0; i < n; i++) {
      const v = (runs[i] as CompiledCondition)(ctx);
      if (isAll ? !v : v) result = !isAll;
    }
    return result;
  };
  if (risk === Risk.always) return exhaustive;
  const short = isAll
    ? (ctx: EvalContext): boolean => {
        for (let i = 0; i < n; i++) if (!(runs[i] as CompiledCondition)(ctx)) return false;
        return true;
      }
    : (ctx: EvalContext): boolean => {
        for (let i = 0; i < n; i++) if ((runs[i] as CompiledCondition)(ctx)) return true;
        return false;
      };
  if (risk === Risk.never) return short;
  return (ctx) => (ctx.hostile ? exhaustive(ctx) : short(ctx));
}

function compileNode(c: Condition): Node {
  if ('any' in c || 'all' in c || 'not' in c) {
    const priority = c.priority ?? 1;
    if ('any' in c) {
      const children = c.any.map(compileNode);
      return { priority, risk: maxRisk(children), run: compileGroup(children, false) };
    }
    if ('all' in c) {
      const children = c.all.map(compileNode);
      return { priority, risk: maxRisk(children), run: compileGroup(children, true) };
    }
    const child = compileNode(c.not);
    const run = child.run;
    return { priority, risk: child.risk, run: (ctx) => !run(ctx) };
  }
  return compileLeaf(c);
}

/**
 * Compiles a validated condition tree into closures, once. The result gives json-rules-engine's
 * verdict on every input (missing facts are `undefined`, as with its `allowUndefinedFacts`).
 */
export function compileCondition(condition: TopCondition): CompiledCondition {
  return compileNode(condition).run;
}

/**
 * {@link compileCondition}, and whether the condition can throw on an event that holds no
 * hostile object (a fact reference, lookup or decorator anywhere in it): only a condition that
 * cannot may be skipped on a false guard (see `guard-index.ts`) without hiding an error.
 */
export function compileConditionInfo(condition: TopCondition): {
  readonly run: CompiledCondition;
  readonly throwsOnPlainEvents: boolean;
} {
  const node = compileNode(condition);
  return { run: node.run, throwsOnPlainEvents: node.risk === Risk.always };
}
