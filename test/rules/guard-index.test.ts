import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  applyControl,
  compileRule,
  conditionGuard,
  createPartition,
  emptyRuleSet,
  evalContext,
  GuardIndex,
  hasHostileObject,
  processRecord,
  type Rule,
  type RuleSet,
} from '../../rules/index.js';
import { eventGenerator, generateRules } from '../../bench/e2e-inputs.js';
import { prng } from '../prng.js';
import { factsArb, models, topArb, validate } from './condition-arbitraries.js';

const enc = new TextEncoder();

// Trees made mostly of plain-field leaves (guard candidates), with any/not/all around them and
// the values json-rules-engine coerces: numeric strings, null, booleans, arrays.
const scalar = fc.oneof(
  fc.integer({ min: -20, max: 20 }),
  fc.double({ min: -100, max: 100, noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom('', '0', '15', '1e3', ' 12abc', 'abc', 'x', 'a', 'true', 'null', '-3.5'),
  fc.boolean(),
  fc.constant(null),
);
const field = fc.constantFrom('a', 'b', 'c', 'missing');
const number = fc.oneof(
  fc.integer({ min: -20, max: 20 }),
  fc.double({ min: -100, max: 100, noNaN: true, noDefaultInfinity: true }),
);
const plainLeaf = fc.oneof(
  fc.record({
    fact: field,
    operator: fc.constantFrom(
      'lessThan',
      'lessThanInclusive',
      'greaterThan',
      'greaterThanInclusive',
    ),
    value: number,
  }),
  fc.record({ fact: field, operator: fc.constant('equal'), value: scalar }),
  fc.record({
    fact: field,
    operator: fc.constant('in'),
    value: fc.array(scalar, { maxLength: 10 }),
  }),
  fc.record({
    fact: field,
    operator: fc.constantFrom('equal', 'notEqual', 'in', 'notIn', 'lessThan', 'greaterThan'),
    value: fc.oneof(scalar, fc.array(scalar, { maxLength: 4 })),
  }),
);
const plainEvent = fc.dictionary(field, fc.oneof(scalar, scalar, number, fc.array(scalar)), {
  maxKeys: 3,
});
const plainTree = fc.letrec((tie) => ({
  node: fc.oneof(
    { depthSize: 'small' },
    plainLeaf,
    plainLeaf,
    tie('all'),
    fc.record({ any: fc.array(tie('node'), { maxLength: 3 }) }),
    fc.record({ not: tie('node') }),
  ),
  all: fc.record({ all: fc.array(tie('node'), { maxLength: 4 }) }),
})).all;

describe('guard index', () => {
  it('skips a rule only where its `when` is false without throwing (random trees and events)', () => {
    const stats = { rules: 0, guarded: 0, judged: 0, skipped: 0 };
    fc.assert(
      fc.property(
        fc.array(fc.oneof(plainTree, plainTree, topArb), { minLength: 1, maxLength: 8 }),
        fc.array(fc.oneof(plainEvent, plainEvent, factsArb), { minLength: 1, maxLength: 6 }),
        (trees, events) => {
          const rules = trees
            .filter((t) => validate(t).length === 0)
            .map((when, i) => compileRule({ id: `r${i}`, on: ['t'], when } as Rule, 1, 1, false));
          stats.rules += rules.length;
          stats.guarded += rules.filter((r) => r.guard !== undefined).length;
          const index = new GuardIndex(rules.map((r) => r.guard));
          for (const facts of events) {
            // The partition judges hostile events exhaustively, without the index.
            if (hasHostileObject(facts)) continue;
            const skipped = index.skipped(facts);
            rules.forEach((r, i) => {
              stats.judged++;
              if (skipped?.[i] !== 1) return;
              stats.skipped++;
              expect(r.when?.(evalContext(facts, models, false))).toBe(false);
            });
          }
        },
      ),
      { numRuns: 4000 },
    );
    console.log(`guard index: ${JSON.stringify(stats)}`);
    // Not vacuous: the trees must yield guards, and the guards must skip.
    expect(stats.guarded).toBeGreaterThan(stats.rules / 4);
    expect(stats.skipped).toBeGreaterThan(1000);
  });

  it('is exact on one-leaf rules: skipped where the leaf is false, at and around each threshold', () => {
    const ops = [
      'lessThan',
      'lessThanInclusive',
      'greaterThan',
      'greaterThanInclusive',
      'equal',
      'in',
    ] as const;
    const limits = [-1.5, 0, 2, 3, 3];
    const rules = ops.flatMap((operator) =>
      limits.map((v, j) =>
        compileRule(
          {
            id: `${operator}-${j}`,
            on: ['t'],
            when: { all: [{ fact: 'a', operator, value: operator === 'in' ? [v, 7] : v }] },
          } as Rule,
          1,
          1,
          false,
        ),
      ),
    );
    expect(rules.every((r) => r.guard !== undefined)).toBe(true);
    const index = new GuardIndex(rules.map((r) => r.guard));
    for (const a of [
      -2,
      -1.5,
      -1,
      0,
      -0,
      1,
      2,
      2.5,
      3,
      3.5,
      7,
      '3',
      '2.5',
      null,
      undefined,
      true,
    ]) {
      const event: Record<string, unknown> = a === undefined ? {} : { a };
      const skipped = index.skipped(event);
      rules.forEach((r, i) => {
        const matches = r.when?.(evalContext(event, models, false)) === true;
        // A non-number value hands the comparisons back to the rules; else exact.
        const handedBack = typeof a !== 'number' && /than/i.test(r.id);
        expect({ id: r.id, a, skipped: skipped?.[i] }).toEqual({
          id: r.id,
          a,
          skipped: matches || handedBack ? 0 : 1,
        });
      });
    }
  });

  it('chooses a comparison over an equality over an `in`, and only plain literal leaves', () => {
    const leaf = (fact: string, operator: string, value: unknown) => ({ fact, operator, value });
    expect(
      conditionGuard({
        all: [
          leaf('country', 'in', ['US']),
          leaf('channel', 'equal', 'web'),
          { all: [leaf('amount', 'greaterThan', 10)] },
        ],
      }),
    ).toEqual([{ fact: 'amount', op: 'gt', value: 10 }]);
    expect(conditionGuard({ all: [leaf('channel', 'equal', 'web')] })).toEqual([
      { fact: 'channel', op: 'eq', value: 'web' },
    ]);
    for (const c of [
      leaf('amount', 'greaterThan', '10'), // coerced comparison
      leaf('amount', 'not:greaterThan', 10), // decorated
      leaf('country', 'in', 'USGB'), // substring test
      leaf('country', 'in', [['US']]), // element matched by identity
      leaf('toString', 'equal', 'x'), // on Object.prototype
      leaf('model:score', 'greaterThan', 1), // not an event field
      { ...leaf('amount', 'greaterThan', 1), path: '$.a' },
      leaf('amount', 'greaterThan', { fact: 'limit' }),
    ])
      expect(conditionGuard({ all: [c] })).toBeUndefined();
    expect(conditionGuard({ not: leaf('a', 'equal', 1) })).toBeUndefined();
  });

  it('guards an `any` by the guards of every member, or not at all', () => {
    const leaf = (fact: string, operator: string, value: unknown) => ({ fact, operator, value });
    expect(
      conditionGuard({
        any: [
          leaf('amount', 'greaterThan', 20000),
          { all: [leaf('country', 'in', ['NG']), leaf('channel', 'equal', 'atm')] },
        ],
      }),
    ).toEqual([
      { fact: 'amount', op: 'gt', value: 20000 },
      { fact: 'channel', op: 'eq', value: 'atm' },
    ]);
    // A member without a guard can be true whatever the others: no guard.
    expect(
      conditionGuard({ any: [leaf('a', 'equal', 1), { not: leaf('b', 'equal', 2) }] }),
    ).toBeUndefined();
    // An `all` falls back to the smallest guarded `any` among its conjuncts.
    expect(
      conditionGuard({
        all: [
          leaf('a', 'notEqual', 1),
          { any: [leaf('b', 'equal', 1), leaf('c', 'equal', 2)] },
          { any: [leaf('d', 'lessThan', 3)] },
        ],
      }),
    ).toEqual([{ fact: 'd', op: 'lt', value: 3 }]);
    // The rule is skipped only when every guard is false.
    const rule = compileRule(
      {
        id: 'r',
        on: ['t'],
        when: { any: [leaf('a', 'greaterThan', 5), leaf('b', 'equal', 'x')] },
      } as Rule,
      1,
      1,
      false,
    );
    const index = new GuardIndex([rule.guard]);
    expect(index.skipped({ a: 1, b: 'y' })?.[0]).toBe(1);
    expect(index.skipped({ a: 6, b: 'y' })?.[0]).toBe(0);
    expect(index.skipped({ a: 1, b: 'x' })?.[0]).toBe(0);
  });

  it('leaves rules that can throw, and absence rules, unguarded', () => {
    const lookup = compileRule(
      {
        id: 'lookup',
        on: ['t'],
        when: {
          all: [
            { fact: 'amount', operator: 'greaterThan', value: 10 },
            { fact: 'b', operator: 'greaterThan', value: { fact: 'c' } }, // may throw on plain values
          ],
        },
      } as Rule,
      1,
      1,
      false,
    );
    expect(lookup.guard).toBeUndefined();
    const absence = compileRule(
      {
        id: 'absence',
        on: ['order'],
        when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 10 }] },
        pattern: { kind: 'absence', expect: { on: ['paid'] }, within: '1m' },
      } as Rule,
      1,
      1,
      false,
    );
    expect(absence.guard).toBeUndefined();
  });

  it('judges an event with a hostile object exhaustively: the error a skipped rule hides is raised', () => {
    const rs = ruleSet([
      {
        id: 'r',
        on: ['t'],
        when: {
          all: [
            { fact: 'amount', operator: 'greaterThan', value: 5000 },
            { fact: 'b', operator: 'lessThan', value: 3 },
          ],
        },
      } as Rule,
    ]);
    const st = createPartition(rs, { partition: 0 });
    const hostile = {
      type: 't',
      amount: 1,
      b: { toString: 1 }, // `<` converts it: TypeError, as in json-rules-engine
    };
    const out = processRecord(st, {
      kind: 'event',
      seq: 1,
      key: 'k',
      data: enc.encode(JSON.stringify(hostile)),
      publishTs: 1,
    });
    expect(out.errors.map((e) => e.ruleId)).toEqual(['r']);
  });

  it('matches what every rule evaluated on every event matches (bench rules, odd amounts)', () => {
    const rules = generateRules(400, 7);
    const rs = ruleSet(rules);
    const st = createPartition(rs, { partition: 0 });
    const next = eventGenerator(7, 500);
    const rand = prng(11);
    let skippedSome = 0;
    for (let i = 0; i < 4000; i++) {
      const event = JSON.parse(new TextDecoder().decode(next(i).data)) as Record<string, unknown>;
      const r = rand();
      // What the index must hand back to the rules: numeric strings, missing and odd values.
      if (r < 0.05) event.amount = String(event.amount);
      else if (r < 0.08) delete event.amount;
      else if (r < 0.1) event.amount = null;
      else if (r < 0.12) event.channel = 7;
      else if (r < 0.14) delete event.country;
      const type = event.type as string;
      const expected = rs
        .rulesFor(type)
        .filter((rule) => rule.when === undefined || rule.when(evalContext(event, rs.models)))
        .map((rule) => rule.id);
      const out = processRecord(st, {
        kind: 'event',
        seq: i + 1,
        key: event.cardId as string,
        data: enc.encode(JSON.stringify(event)),
        publishTs: 1_000_000 + i,
      });
      expect(out.matched).toEqual(expected);
      const skip = rs.guardsFor(type).skipped(event);
      skippedSome += skip?.reduce((a, b) => a + b, 0) ?? 0;
    }
    expect(skippedSome).toBeGreaterThan(4000 * 10);
  });
});

function ruleSet(rules: readonly Rule[]): RuleSet {
  const a = applyControl(emptyRuleSet(), { op: 'replace-all', rules }, 1);
  if (!a.ok) throw new Error(JSON.stringify(a));
  return a.ruleSet;
}
