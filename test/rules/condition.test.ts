import { describe, expect, it } from 'vitest';
import {
  compileCondition,
  compileModel,
  evalContext,
  type CompiledModel,
} from '../../rules/index.js';
import { jreVerdict } from './jre-reference.js';

const models = new Map<string, CompiledModel>([
  ['blocked', compileModel({ id: 'blocked', kind: 'lookup', values: ['c-1', 'c-2'] })],
  [
    'mcc-risk',
    compileModel({ id: 'mcc-risk', kind: 'lookup', entries: { '7995': 0.9, '5411': 0.1 } }),
  ],
  [
    'fraud',
    compileModel({
      id: 'fraud',
      kind: 'logistic',
      features: [
        { name: 'amount', transform: 'log1p' },
        { name: 'newDevice', transform: 'bool' },
      ],
      weights: { amount: 0.8, newDevice: 2 },
      bias: -6,
    }),
  ],
]);

/** The compiled verdict, checked against json-rules-engine on the same input. */
async function both(
  condition: unknown,
  facts: Record<string, unknown>,
): Promise<boolean | 'error'> {
  let ours: boolean | 'error';
  try {
    ours = compileCondition(condition as never)(evalContext(facts, models));
  } catch {
    ours = 'error';
  }
  expect(await jreVerdict(condition, facts, models)).toBe(ours);
  return ours;
}

const leaf = (
  fact: string,
  operator: string,
  value: unknown,
  extra: Record<string, unknown> = {},
) => ({ all: [{ fact, operator, value, ...extra }] });

describe("json-rules-engine's semantics, surprises included", () => {
  it('numeric operators coerce: "15" > 10 passes, "abc" > 10 fails, a missing fact fails', async () => {
    expect(await both(leaf('amount', 'greaterThan', 10), { amount: '15' })).toBe(true);
    expect(await both(leaf('amount', 'greaterThan', 10), { amount: 'abc' })).toBe(false);
    expect(await both(leaf('amount', 'greaterThan', 10), {})).toBe(false);
    expect(await both(leaf('amount', 'lessThan', 10), { amount: '1e3' })).toBe(false);
  });

  it('`in` on a string value is a substring test; on a fact-referenced number it throws', async () => {
    expect(await both(leaf('c', 'in', 'NG,RU'), { c: 'G,R' })).toBe(true);
    expect(await both(leaf('c', 'in', { fact: 'n' }), { c: 1, n: 5 })).toBe('error');
  });

  it('`in` with a string value converts the fact, which can throw; the error is not hidden by a false sibling', async () => {
    expect(
      await both(
        {
          all: [
            { fact: 'a', operator: 'equal', value: 1 },
            { fact: 'o', operator: 'in', value: 'xyz' },
          ],
        },
        { a: 2, o: { toString: 1 } },
      ),
    ).toBe('error');
  });

  it('facts are own properties only, also when Object.prototype has a field of that name', async () => {
    for (const fact of ['toString', 'hasOwnProperty', 'isPrototypeOf']) {
      expect(await both(leaf(fact, 'equal', 1), {})).toBe(false);
      // A missing fact is undefined, which `in` on a string converts to "undefined".
      expect(await both(leaf(fact, 'in', 'undefined'), {})).toBe(true);
      expect(await both(leaf(fact, 'equal', 1), { [fact]: 1 })).toBe(true);
      expect(await both(leaf(fact, 'notEqual', 1), {})).toBe(true);
      expect(await both(leaf(fact, 'greaterThan', 0), { [fact]: 3 })).toBe(true);
    }
  });

  it('short-circuits an `all` on a false numeric leaf, yet raises the error of a hostile sibling', async () => {
    const c = {
      all: [
        { fact: 'a', operator: 'greaterThan', value: 10 },
        { fact: 'o', operator: 'lessThan', value: 3 },
      ],
    };
    expect(await both(c, { a: 2, o: 1 })).toBe(false);
    expect(await both(c, { a: 2, o: { valueOf: 1, toString: 1 } })).toBe('error');
    expect(await both(c, { a: 2, o: [{ toString: 1 }] })).toBe('error');
    expect(await both(c, { a: 2, o: Object.create(null) as object })).toBe('error');
  });

  it('an empty `any` is true, like an empty `all`', async () => {
    expect(await both({ any: [] }, {})).toBe(true);
    expect(await both({ all: [] }, {})).toBe(true);
  });

  it('a path on a non-object fact yields the fact itself', async () => {
    expect(await both(leaf('amount', 'equal', 5, { path: '$.value' }), { amount: 5 })).toBe(true);
    expect(
      await both(leaf('card', 'equal', 'US', { path: '$.address.country' }), {
        card: { address: { country: 'US' } },
      }),
    ).toBe(true);
    expect(await both(leaf('items', 'equal', 2, { path: '$.length' }), { items: [1, 2] })).toBe(
      true,
    );
  });

  it('decorators compose: someFact, everyValue, swap, not', async () => {
    expect(await both(leaf('tags', 'someFact:equal', 'vip'), { tags: ['a', 'vip'] })).toBe(true);
    expect(await both(leaf('n', 'everyValue:lessThan', [5, 6]), { n: 4 })).toBe(true);
    expect(await both(leaf('n', 'swap:contains', [1, 2]), { n: 2 })).toBe(true);
    expect(await both(leaf('n', 'not:in', [1, 2]), { n: 3 })).toBe(true);
  });

  it('inside one priority group every condition runs, so an error is not hidden by a false sibling', async () => {
    const c = {
      all: [
        { fact: 'a', operator: 'equal', value: 1 },
        { fact: 'a', operator: 'in', value: { fact: 'b' } },
      ],
    };
    expect(await both(c, { a: 2, b: 7 })).toBe('error');
    // A higher-priority group that fails first does short-circuit the rest.
    const p = {
      all: [
        { fact: 'a', operator: 'equal', value: 1, priority: 2 },
        { fact: 'a', operator: 'in', value: { fact: 'b' } },
      ],
    };
    expect(await both(p, { a: 2, b: 7 })).toBe(false);
  });

  it('lookup tables and scorers are facts: list:<id> with and without params, model:<id>', async () => {
    expect(await both(leaf('card', 'in', { fact: 'list:blocked' }), { card: 'c-2' })).toBe(true);
    expect(
      await both(leaf('list:blocked', 'equal', true, { params: { key: 'card' } }), { card: 'c-9' }),
    ).toBe(false);
    expect(
      await both(leaf('list:mcc-risk', 'greaterThan', 0.5, { params: { key: 'mcc' } }), {
        mcc: 7995,
      }),
    ).toBe(true);
    expect(
      await both(leaf('model:fraud', 'greaterThan', 0.5), { amount: 5000, newDevice: true }),
    ).toBe(true);
    expect(
      await both(leaf('model:fraud', 'greaterThan', 0.5), { amount: 20, newDevice: false }),
    ).toBe(false);
  });
});

describe('models', () => {
  it('a logistic scorer applies transforms, defaults and clamps', () => {
    const m = compileModel({
      id: 'm',
      kind: 'logistic',
      features: [
        { name: 'x', clamp: [0, 1] },
        { name: 'y', default: 3 },
      ],
      weights: { x: 10, y: 1 },
      bias: -3,
      clamp: [0.1, 0.9],
    });
    if (m.kind !== 'scorer') throw new Error('expected a scorer');
    expect(m.score({ x: 100 })).toBeCloseTo(0.9); // clamp of x to 1, then output clamp
    expect(m.score({ x: -5, y: 'n/a' })).toBeCloseTo(0.5); // x -> 0, y -> default 3: z = 0
  });

  it('a linear scorer is bias plus weighted features', () => {
    const m = compileModel({
      id: 'm',
      kind: 'linear',
      features: [{ name: 'a' }, { name: 'b', field: 'other' }],
      weights: { a: 2, b: -1 },
      bias: 1,
    });
    if (m.kind !== 'scorer') throw new Error('expected a scorer');
    expect(m.score({ a: 3, other: 4 })).toBe(3);
  });
});
