import { describe, expect, it } from 'vitest';
import {
  compileRule,
  DEFAULT_LIMITS,
  explainRule,
  incompatibility,
  keyCoverage,
  validateRule,
  type Rule,
} from '../../rules/index.js';
import type { Problem } from '../../rules/errors.js';
import { keyValue } from '../../rules/rule-key.js';
import { Feed, ruleSetOf, upsert } from './harness.js';

const problemsOf = (key: unknown): Problem[] => {
  const problems: Problem[] = [];
  validateRule(
    { id: 'r', on: ['payment'], key, when: { all: [{ fact: 'a', operator: 'equal', value: 1 }] } },
    '/rule',
    DEFAULT_LIMITS,
    problems,
  );
  return problems;
};

const pair: Rule = {
  id: 'pair',
  on: ['payment'],
  key: ['payer', 'payee'],
  pattern: { kind: 'threshold', aggregate: 'count', window: 1000, operator: '>=', value: 2 },
};

describe('a rule keyed by several fields (a composite key)', () => {
  it('accepts one field or a list of 1-8 distinct fields, and says what is wrong otherwise', () => {
    expect(problemsOf('payer')).toEqual([]);
    expect(problemsOf(['payer', 'payee'])).toEqual([]);
    expect(problemsOf([])).toEqual([
      { pointer: '/rule/key', message: expect.stringContaining('1 to 8 fields') as string },
    ]);
    expect(problemsOf(Array.from({ length: 9 }, (_, i) => `f${i}`))[0]?.message).toContain(
      'it names 9',
    );
    expect(problemsOf(['payer', 'payer'])).toEqual([
      {
        pointer: '/rule/key/1',
        message: 'key names the field "payer" twice; name each field once',
      },
    ]);
    expect(problemsOf(['payer', 7])[0]?.pointer).toBe('/rule/key/1');
    expect(problemsOf(['payer', '__proto__'])[0]?.pointer).toBe('/rule/key/1');
    expect(problemsOf({ fields: ['payer'] })[0]?.pointer).toBe('/rule/key');
  });

  it('keys by the values of all its fields; an event lacking one does not meet the rule', () => {
    expect(keyValue(['payer'], { payer: 'p1' })).toBe('p1');
    expect(keyValue(['payer'], { payer: 42 })).toBe('42');
    expect(keyValue(['payer', 'payee'], { payer: 'p1', payee: 9 })).toBe('["p1","9"]');
    expect(keyValue(['payer', 'payee'], { payer: 'p1' })).toBeUndefined();
    expect(keyValue(['payer', 'payee'], { payer: 'p1', payee: null })).toBeUndefined();
    expect(keyValue(['payer', 'payee'], { payer: 'p1', payee: Infinity })).toBeUndefined();
    // Values holding the separator of a naive join cannot meet another pair's key.
    expect(keyValue(['a', 'b'], { a: 'x","y', b: 'z' })).not.toBe(
      keyValue(['a', 'b'], { a: 'x', b: 'y","z' }),
    );
  });

  it('counts per combination of values, and counts events without a key field', () => {
    const f = new Feed(ruleSetOf(upsert(pair)));
    f.event({ type: 'payment', payer: 'p1', payee: 'b1', ts: 10 });
    f.event({ type: 'payment', payer: 'p1', payee: 'b2', ts: 20 }); // another pair
    f.event({ type: 'payment', payer: 'p2', payee: 'b1', ts: 30 }); // another pair
    const missing = f.event({ type: 'payment', payer: 'p1', ts: 35 });
    f.event({ type: 'payment', payer: 'p1', payee: 'b1', ts: 40 }); // second of (p1, b1)
    f.tick(10_000);
    expect(missing.keyMissing).toEqual(['pair']);
    expect(f.alerts.map((a) => [a.key, a.ts])).toEqual([['["p1","b1"]', 40]]);
  });

  it('resets state when the fields or their order change, not when one field is written as a list', () => {
    const at = (key: Rule['key']): Rule => ({ ...pair, key });
    expect(incompatibility(at(['payer', 'payee']), at(['payee', 'payer']))).toBe('key changed');
    expect(incompatibility(at(['payer', 'payee']), at(['payer']))).toBe('key changed');
    expect(incompatibility(at('payer'), at(['payer']))).toBeUndefined();
    expect(incompatibility(at(undefined), at(['payer']))).toBe('key changed');
  });

  it('explain and key coverage read the key as the live path does', () => {
    const rule = compileRule(pair, 1, 1, false);
    const ok = explainRule(rule, { type: 'payment', payer: 'p1', payee: 'b1' }, new Map());
    expect(ok.checks.key).toEqual({
      field: ['payer', 'payee'],
      value: { payer: 'p1', payee: 'b1' },
      passed: true,
    });
    const lacking = explainRule(rule, { type: 'payment', payer: 'p1' }, new Map());
    expect(lacking.checks.key).toEqual({
      field: ['payer', 'payee'],
      value: { payer: 'p1', payee: undefined },
      passed: false,
    });
    const enc = (o: unknown) => ({
      data: new TextEncoder().encode(JSON.stringify(o)),
      storedAt: 1000,
    });
    const sample = [
      enc({ type: 'payment', payer: 'p1', payee: 'b1' }),
      enc({ type: 'payment', payer: 'p1' }),
      enc({ type: 'payment', payee: 'b1' }),
    ];
    expect(keyCoverage(ruleSetOf(upsert(pair)), ['pair'], sample, DEFAULT_LIMITS)).toEqual([
      { ruleId: 'pair', keyFields: ['payer', 'payee'], ofItsTypes: 3, keyMissing: 2 },
    ]);
  });
});
