/**
 * The built-in operators and operator decorators of json-rules-engine 7.x, with the same
 * semantics to the letter (including its surprises, documented in docs/rule-language.md):
 * numeric operators first require `parseFloat(fact)` to be a number and then compare with JS
 * coercion; `in` on a string value is a substring test and throws on other non-arrays; `contains`
 * needs an array fact. Decorators (`someFact:`, `someValue:`, `everyFact:`, `everyValue:`, `swap:`,
 * `not:`) compose by prefix, e.g. `not:someFact:equal`.
 */

/** Evaluates `factValue <op> value`; may throw exactly where json-rules-engine throws. */
export type OperatorFn = (factValue: unknown, value: unknown) => boolean;

interface OperatorDef {
  readonly cb: (a: any, b: any) => boolean; // eslint-disable-line @typescript-eslint/no-explicit-any
  readonly validator?: (a: unknown) => boolean;
}

/** json-rules-engine's number validator: `parseFloat(x)` is a number. May throw on a hostile object. */
export function isNumeric(factValue: unknown): boolean {
  // For a number, parseFloat(String(x)) is NaN exactly when x is: skip the string round trip.
  if (typeof factValue === 'number') return !Number.isNaN(factValue);
  return Number.parseFloat(factValue as string).toString() !== 'NaN';
}

/* eslint-disable @typescript-eslint/no-explicit-any */
const BASE: Readonly<Record<string, OperatorDef>> = {
  equal: { cb: (a, b) => a === b },
  notEqual: { cb: (a, b) => a !== b },
  in: { cb: (a, b: any) => b.indexOf(a) > -1 },
  notIn: { cb: (a, b: any) => b.indexOf(a) === -1 },
  contains: { cb: (a: any, b) => a.indexOf(b) > -1, validator: Array.isArray },
  doesNotContain: { cb: (a: any, b) => a.indexOf(b) === -1, validator: Array.isArray },
  lessThan: { cb: (a, b) => a < b, validator: isNumeric },
  lessThanInclusive: { cb: (a, b) => a <= b, validator: isNumeric },
  greaterThan: { cb: (a, b) => a > b, validator: isNumeric },
  greaterThanInclusive: { cb: (a, b) => a >= b, validator: isNumeric },
};

type Decorator = (next: OperatorFn) => OperatorFn;

const DECORATORS: Readonly<Record<string, Decorator>> = {
  someFact: (next) => (a: any, b) => Array.isArray(a) && a.some((fv) => next(fv, b)),
  someValue: (next) => (a, b: any) => b.some((jv: unknown) => next(a, jv)),
  everyFact: (next) => (a: any, b) => Array.isArray(a) && a.every((fv) => next(fv, b)),
  everyValue: (next) => (a, b: any) => b.every((jv: unknown) => next(a, jv)),
  swap: (next) => (a, b) => next(b, a),
  not: (next) => (a, b) => !next(a, b),
};
/* eslint-enable @typescript-eslint/no-explicit-any */

/** Names of json-rules-engine's built-in operators. */
export const OPERATOR_NAMES: readonly string[] = Object.keys(BASE);
/** Names of json-rules-engine's built-in operator decorators. */
export const DECORATOR_NAMES: readonly string[] = Object.keys(DECORATORS);

/** What a resolved operator needs of its operands to be sure not to throw. */
export interface ResolvedOperator {
  readonly name: string;
  readonly evaluate: OperatorFn;
  /** The base operator after all decorators, e.g. `equal` for `not:someFact:equal`. */
  readonly base: string;
  readonly decorators: readonly string[];
}

/**
 * Resolves an operator name as json-rules-engine's OperatorMap does: peel decorators off the
 * front until a base operator is left. Returns `undefined` for an unknown name.
 */
export function resolveOperator(name: string): ResolvedOperator | undefined {
  const decorators: string[] = [];
  let rest = name;
  while (!Object.hasOwn(BASE, rest)) {
    const i = rest.indexOf(':');
    if (i <= 0) return undefined;
    const d = rest.slice(0, i);
    if (!Object.hasOwn(DECORATORS, d)) return undefined;
    decorators.push(d);
    rest = rest.slice(i + 1);
  }
  const base = BASE[rest] as OperatorDef;
  const validator = base.validator;
  const cb = base.cb;
  let evaluate: OperatorFn = validator ? (a, b) => validator(a) && cb(a, b) : cb;
  for (let i = decorators.length - 1; i >= 0; i--) {
    evaluate = (DECORATORS[decorators[i] as string] as Decorator)(evaluate);
  }
  return { name, evaluate, base: rest, decorators };
}
