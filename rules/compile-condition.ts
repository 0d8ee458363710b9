import { parsePath, resolveSegments } from './json-path.js';
import { lookupFact, type ModelRegistry } from './models.js';
import { resolveOperator } from './operators.js';
import type { Condition, TopCondition } from './types.js';

/** What a compiled condition reads: the event's fields, the models in force, earlier steps' events. */
export interface EvalContext {
  readonly event: Readonly<Record<string, unknown>>;
  readonly models: ModelRegistry;
  /** Events of earlier sequence steps, by step name (facts `step:<name>`). */
  steps: Readonly<Record<string, unknown>> | undefined;
  /** Model scores computed for this event, so each model runs at most once per event. */
  scores: Map<string, number> | undefined;
}

/** Creates the context for judging one event. */
export function evalContext(
  event: Readonly<Record<string, unknown>>,
  models: ModelRegistry,
): EvalContext {
  return { event, models, steps: undefined, scores: undefined };
}

/** A compiled condition: true or false, or throws where json-rules-engine's run would reject. */
export type CompiledCondition = (ctx: EvalContext) => boolean;

interface Node {
  readonly run: CompiledCondition;
  readonly priority: number;
  /** False only when the node can be shown never to throw, so short-circuiting cannot hide an error. */
  readonly mayThrow: boolean;
}

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
        mayThrow: true,
        run: (ctx) => {
          const m = ctx.models.get(id);
          if (m !== undefined && m.kind === 'set') return m.set.has(left(ctx)) !== negate;
          return evaluate(left(ctx), right(ctx));
        },
      };
    }
    return { priority, mayThrow: true, run: (ctx) => evaluate(left(ctx), right(ctx)) };
  }
  // `indexOf` on an array never converts its argument; on a string it does, and that can throw.
  const safe =
    op.decorators.length === 0 &&
    (op.base === 'equal' ||
      op.base === 'notEqual' ||
      op.base === 'contains' ||
      op.base === 'doesNotContain' ||
      ((op.base === 'in' || op.base === 'notIn') && Array.isArray(value)));
  if (
    op.decorators.length === 0 &&
    (op.base === 'in' || op.base === 'notIn') &&
    Array.isArray(value) &&
    value.length > 8
  ) {
    const set = new Set(value);
    const negate = op.base === 'notIn';
    return { priority, mayThrow: false, run: (ctx) => set.has(left(ctx)) !== negate };
  }
  return { priority, mayThrow: !safe, run: (ctx) => evaluate(left(ctx), value) };
}

/**
 * Evaluates children as json-rules-engine's prioritizeAndRun does: groups by priority, highest
 * first, short-circuiting between groups. Inside a group json-rules-engine evaluates every
 * condition (Promise.all), so an error anywhere in the group rejects the run; we short-circuit
 * inside a group only when no condition in it can throw.
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
    .map(([, nodes]) => {
      const runs = nodes.map((n) => n.run);
      const exhaustive = nodes.some((n) => n.mayThrow);
      return { runs, exhaustive };
    });
  const evalSet = (
    runs: readonly CompiledCondition[],
    exhaustive: boolean,
    ctx: EvalContext,
  ): boolean => {
    if (!exhaustive) return isAll ? runs.every((r) => r(ctx)) : runs.some((r) => r(ctx));
    let result = isAll;
    for (const r of runs) {
      const v = r(ctx);
      if (isAll ? !v : v) result = !isAll;
    }
    return result;
  };
  if (sets.length === 1) {
    const { runs, exhaustive } = sets[0] as (typeof sets)[number];
    return (ctx) => evalSet(runs, exhaustive, ctx);
  }
  return (ctx) => {
    for (const { runs, exhaustive } of sets) {
      const v = evalSet(runs, exhaustive, ctx);
      if (isAll ? !v : v) return v;
    }
    return isAll;
  };
}

function compileNode(c: Condition): Node {
  if ('any' in c || 'all' in c || 'not' in c) {
    const priority = c.priority ?? 1;
    if ('any' in c) {
      const children = c.any.map(compileNode);
      return {
        priority,
        mayThrow: children.some((n) => n.mayThrow),
        run: compileGroup(children, false),
      };
    }
    if ('all' in c) {
      const children = c.all.map(compileNode);
      return {
        priority,
        mayThrow: children.some((n) => n.mayThrow),
        run: compileGroup(children, true),
      };
    }
    const child = compileNode(c.not);
    const run = child.run;
    return { priority, mayThrow: child.mayThrow, run: (ctx) => !run(ctx) };
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
