import { describe, expect, it } from 'vitest';
import { applyControl, DEFAULT_LIMITS, emptyRuleSet, keyCoverage } from '../../rules/index.js';

const enc = (o: unknown): Uint8Array =>
  new TextEncoder().encode(typeof o === 'string' ? o : JSON.stringify(o));
const at = (o: unknown) => ({ data: enc(o), storedAt: 1000 });

const rules = (() => {
  let rs = emptyRuleSet();
  const upsert = (rule: unknown) => {
    const out = applyControl(rs, { op: 'upsert-rule', rule }, rs.controlSeq + 1);
    if (!out.ok) throw new Error(JSON.stringify(out.problems));
    rs = out.ruleSet;
  };
  const when = { all: [{ fact: 'amount', operator: 'greaterThan', value: 0 }] };
  upsert({ id: 'by-payee', on: ['payment'], key: 'payee', when, alert: { title: 't' } });
  upsert({ id: 'by-record-key', on: ['payment'], when, alert: { title: 't' } });
  upsert({ id: 'any-type', on: ['*'], key: 'card', when, alert: { title: 't' } });
  return rs;
})();

describe('keyCoverage: how a sample of events meets a rule keyed by its own field', () => {
  it('counts the events of its types, and those without the key, as the live path reads them', () => {
    const sample = [
      at({ type: 'payment', amount: 5, payee: 'p1' }),
      at({ type: 'payment', amount: 5, payee: 42 }), // a number is a key
      at({ type: 'payment', amount: 9, payee: 'p2' }),
      at({ type: 'payment', amount: 5 }), // no payee
      at({ type: 'payment', amount: 5, payee: { nested: 1 } }), // neither string nor number
      at({ type: 'login', payee: 'x' }), // not of its types
      at('not json'), // dead-lettered live: left out
      at({ amount: 5 }), // no type: left out
    ];
    expect(keyCoverage(rules, ['by-payee'], sample, DEFAULT_LIMITS)).toEqual([
      { ruleId: 'by-payee', keyFields: ['payee'], ofItsTypes: 5, keyMissing: 2 },
    ]);
  });

  it('leaves out rules keyed by the record key and rules it does not hold; a rule on every type sees them all', () => {
    const sample = [at({ type: 'payment', card: 'c' }), at({ type: 'login' }), at({ type: 'x' })];
    expect(
      keyCoverage(rules, ['by-record-key', 'gone', 'any-type'], sample, DEFAULT_LIMITS),
    ).toEqual([{ ruleId: 'any-type', keyFields: ['card'], ofItsTypes: 3, keyMissing: 2 }]);
    expect(keyCoverage(rules, ['by-payee'], [], DEFAULT_LIMITS)).toEqual([
      { ruleId: 'by-payee', keyFields: ['payee'], ofItsTypes: 0, keyMissing: 0 },
    ]);
  });
});
