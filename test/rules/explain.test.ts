import fc from 'fast-check';
import { Engine } from 'json-rules-engine';
import { describe, expect, it } from 'vitest';
import {
  compileModel,
  compileRule,
  DEFAULT_LIMITS,
  explainCondition,
  explainRule,
  lookupFact,
  newRefs,
  validateTopCondition,
  type CompiledModel,
  type ExplainedCondition,
  type Problem,
} from '../../rules/index.js';
import { jreVerdict } from './jre-reference.js';

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

const models = new Map<string, CompiledModel>([
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

const factsArb = fc.dictionary(fc.constantFrom('a', 'b', 'c', 'obj', 'arr'), jsonValue, {
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

const topArb = fc.oneof(
  fc.record({ all: fc.array(conditionArb, { maxLength: 5 }) }),
  fc.record({ any: fc.array(conditionArb, { maxLength: 5 }) }),
  fc.record({ not: conditionArb }),
);

function stripUndefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

function validate(tree: unknown): Problem[] {
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

/** json-rules-engine's result tree (`RuleResult.toJSON`), or 'error' when its run rejects. */
async function jreTree(conditions: unknown, facts: Record<string, unknown>): Promise<unknown> {
  const engine = new Engine([], { allowUndefinedFacts: true });
  for (const [id, m] of models) {
    if (m.kind === 'scorer') engine.addFact(`model:${id}`, () => m.score(facts));
    else
      engine.addFact(`list:${id}`, (params: Record<string, unknown>) =>
        lookupFact(m, facts, typeof params?.key === 'string' ? params.key : undefined),
      );
  }
  engine.addRule({ conditions: structuredClone(conditions) as never, event: { type: 'fired' } });
  try {
    const { results, failureResults } = await engine.run(facts);
    const r = (results[0] ?? failureResults[0]) as unknown as {
      toJSON(s: boolean): { conditions: unknown };
    };
    return r.toJSON(false).conditions;
  } catch {
    return 'error';
  }
}

/** The leaves of a tree in order, as json-rules-engine's toJSON shows them. */
function leaves(node: unknown, out: string[] = []): string[] {
  const n = node as Record<string, unknown>;
  if (Array.isArray(n.all)) for (const c of n.all) leaves(c, out);
  else if (Array.isArray(n.any)) for (const c of n.any) leaves(c, out);
  else if (n.not !== undefined) leaves(n.not, out);
  else
    out.push(
      JSON.stringify({ factResult: n.factResult, valueResult: n.valueResult, result: n.result }),
    );
  return out;
}

describe('explain vs json-rules-engine', () => {
  it('gives the same verdict, and the same fact value and result at every leaf, on 3,000 random trees', async () => {
    const stats = { compared: 0, refused: 0, error: 0, leaves: 0 };
    await fc.assert(
      fc.asyncProperty(topArb, factsArb, async (tree, facts) => {
        if (validate(tree).length > 0) {
          stats.refused++;
          return;
        }
        const explained = explainCondition(tree as never, { event: facts, models });
        expect(explained.verdict).toBe(await jreVerdict(tree, facts, models));
        stats.compared++;
        if (explained.verdict === 'error') {
          stats.error++;
          expect(JSON.stringify(explained.conditions)).toContain('"error"');
          return;
        }
        const reference = leaves(await jreTree(tree, facts));
        const ours = leaves(explained.conditions);
        stats.leaves += ours.length;
        expect(ours).toEqual(reference);
      }),
      { numRuns: 3000, seed: 20261201 },
    );
    // The generator must exercise every outcome, or the comparison proves little.
    expect(stats.compared).toBeGreaterThan(1000);
    expect(stats.error).toBeGreaterThan(20);
    expect(stats.leaves).toBeGreaterThan(3000);
  });

  it('explains a rule: type, key and condition checks, and pattern inputs', () => {
    const rule = compileRule(
      {
        id: 'takeover',
        on: ['login', 'payment'],
        key: 'user',
        when: {
          all: [
            { fact: 'amount', operator: 'greaterThan', value: 10, priority: 2 },
            { fact: 'country', operator: 'equal', value: 'NG' },
          ],
        },
        pattern: {
          kind: 'sequence',
          within: '10m',
          steps: [
            { name: 'login', on: ['login'] },
            {
              name: 'pay',
              on: ['payment'],
              when: {
                all: [
                  {
                    fact: 'amount',
                    operator: 'greaterThan',
                    value: { fact: 'step:login', path: '$.amount' },
                  },
                ],
              },
            },
          ],
        },
      },
      7,
      7,
      false,
    );
    const e = explainRule(
      rule,
      { type: 'payment', user: 'u1', amount: 5, country: 'NG' },
      new Map(),
    );
    expect(e).toMatchObject({
      ruleId: 'takeover',
      version: 7,
      verdict: 'no-match',
      checks: {
        type: { passed: true },
        key: { field: 'user', value: 'u1', passed: true },
        when: { verdict: false },
      },
      pattern: {
        kind: 'sequence',
        steps: [
          { name: 'login', typePassed: false },
          { name: 'pay', typePassed: true },
        ],
      },
    });
    // Priority 2 runs first and decides: the second leaf is never evaluated, as in json-rules-engine.
    const all = (e.checks.when?.conditions as { all: ExplainedCondition[] }).all;
    expect(all[0]).toMatchObject({ factResult: 5, result: false });
    expect(all[1]).not.toHaveProperty('result');
    const noKey = explainRule(rule, { type: 'payment', amount: 50, country: 'NG' }, new Map());
    expect(noKey.verdict).toBe('no-match');
    expect(noKey.checks.key.passed).toBe(false);
    expect(
      explainRule(rule, { type: 'payment', user: 'u1', amount: 50, country: 'NG' }, new Map())
        .verdict,
    ).toBe('match');
  });
});
