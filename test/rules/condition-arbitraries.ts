/**
 * Random condition trees, fact objects and models for the property tests that compare the rules
 * core with json-rules-engine (`differential.test.ts`, `explain.test.ts`).
 */
import fc from 'fast-check';
import {
  compileModel,
  DEFAULT_LIMITS,
  newRefs,
  validateTopCondition,
  type CompiledModel,
  type Problem,
} from '../../rules/index.js';

const FACTS = ['a', 'b', 'c', 'obj', 'arr', 'missing'];
// toString/valueOf as own keys make JS conversions throw: the errors must match json-rules-engine's too.
const NAMES = ['a', 'b', 'x', 'y', 'length', '0', '1', 'toString', 'valueOf'];
const BASE_OPS = [
  'equal',
  'notEqual',
  'in',
  'notIn',
  'contains',
  'doesNotContain',
  'lessThan',
  'lessThanInclusive',
  'greaterThan',
  'greaterThanInclusive',
];
const DECORATORS = ['someFact', 'someValue', 'everyFact', 'everyValue', 'swap', 'not'];

export const models = new Map<string, CompiledModel>([
  ['risky', compileModel({ id: 'risky', kind: 'lookup', values: ['NG', 'RU', 7, 'x'] })],
  [
    'limits',
    compileModel({ id: 'limits', kind: 'lookup', entries: { x: 10, y: 'high', '7': [1, 2] } }),
  ],
  [
    'score',
    compileModel({
      id: 'score',
      kind: 'logistic',
      features: [{ name: 'a' }, { name: 'b', transform: 'log1p', clamp: [0, 5] }],
      weights: { a: 0.5, b: -1.25 },
      bias: 0.1,
    }),
  ],
]);

const scalar = fc.oneof(
  fc.integer({ min: -20, max: 20 }),
  fc.double({ min: -100, max: 100, noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom('', '0', '15', '1e3', ' 12abc', 'abc', 'NG', 'x', 'a', 'true', 'null', '-3.5'),
  fc.boolean(),
  fc.constant(null),
);
const jsonValue: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    scalar,
    scalar,
    tie('array'),
    tie('object'),
  ),
  array: fc.array(tie('value'), { maxLength: 4 }),
  object: fc.dictionary(fc.constantFrom(...NAMES), tie('value'), { maxKeys: 4 }),
})).value;

export const factsArb = fc.dictionary(fc.constantFrom('a', 'b', 'c', 'obj', 'arr'), jsonValue, {
  maxKeys: 5,
});

const pathArb = fc.oneof(
  fc.constant(undefined),
  fc
    .array(
      fc.oneof(
        fc.constantFrom('.a', '.b', '.x', '.length', "['a']", "['y']"),
        fc.integer({ min: 0, max: 2 }).map((i) => `[${i}]`),
      ),
      { minLength: 1, maxLength: 3 },
    )
    .map((s) => `$${s.join('')}`),
);

const factName = fc.oneof(
  fc.constantFrom(...FACTS),
  fc.constantFrom('model:score', 'list:risky', 'list:limits'),
);
const paramsFor = (fact: string): fc.Arbitrary<Record<string, unknown> | undefined> =>
  fact.startsWith('list:')
    ? fc.oneof(
        fc.constant(undefined),
        fc.constantFrom('a', 'b', 'c').map((key) => ({ key })),
      )
    : fc.constant(undefined);

const factRef = factName.chain((fact) =>
  fc.record(
    { fact: fc.constant(fact), path: pathArb, params: paramsFor(fact) },
    { requiredKeys: ['fact'] },
  ),
);

const operatorArb = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...BASE_OPS) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(
        fc.array(fc.constantFrom(...DECORATORS), { minLength: 1, maxLength: 2 }),
        fc.constantFrom(...BASE_OPS),
      )
      .map(([d, o]) => `${d.join(':')}:${o}`),
  },
);

const valueArb = fc.oneof(
  { weight: 4, arbitrary: scalar },
  { weight: 3, arbitrary: fc.array(scalar, { maxLength: 12 }) },
  { weight: 2, arbitrary: factRef },
);

const leafArb = fc
  .record({
    fact: factName,
    operator: operatorArb,
    value: valueArb,
    path: pathArb,
    priority: fc.oneof(fc.constant(undefined), fc.integer({ min: 1, max: 3 })),
  })
  .chain((leaf) => paramsFor(leaf.fact).map((params) => ({ ...leaf, params })))
  .map((leaf) => Object.fromEntries(Object.entries(leaf).filter(([, v]) => v !== undefined)));

const conditionArb: fc.Arbitrary<Record<string, unknown>> = fc.letrec((tie) => ({
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leafArb,
    tie('all'),
    tie('any'),
    tie('not'),
  ),
  all: fc
    .record({
      all: fc.array(tie('node'), { maxLength: 4 }),
      priority: fc.oneof(fc.constant(undefined), fc.integer({ min: 1, max: 3 })),
    })
    .map(stripUndefined),
  any: fc
    .record({
      any: fc.array(tie('node'), { maxLength: 4 }),
      priority: fc.oneof(fc.constant(undefined), fc.integer({ min: 1, max: 3 })),
    })
    .map(stripUndefined),
  not: fc.record({ not: tie('node') }),
})).node as fc.Arbitrary<Record<string, unknown>>;

export const topArb = fc.oneof(
  fc.record({ all: fc.array(conditionArb, { maxLength: 5 }) }),
  fc.record({ any: fc.array(conditionArb, { maxLength: 5 }) }),
  fc.record({ not: conditionArb }),
);

function stripUndefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

export function validate(tree: unknown): Problem[] {
  const problems: Problem[] = [];
  validateTopCondition(tree, '/when', {
    limits: { ...DEFAULT_LIMITS, maxConditionDepth: 20, maxConditions: 1000 },
    problems,
    refs: newRefs(),
    stepNames: new Set(),
    leafCount: 0,
  });
  return problems;
}
