import { describe, expect, it } from 'vitest';
import { applyControl, emptyRuleSet } from '../../rules/index.js';

const problemsOf = (message: unknown) => {
  const o = applyControl(emptyRuleSet(), message, 1);
  return o.ok ? [] : o.problems;
};

const ID_MESSAGE =
  'id must be 1-128 letters, digits, "_" or "-", starting with a letter or digit (it is used as a NATS subject token)';

describe('rules and models are refused for the same id and description problems', () => {
  it('a rule', () => {
    const when = { all: [{ fact: 'n', operator: 'equal', value: 1 }] };
    expect(
      problemsOf({ op: 'upsert-rule', rule: { id: 'a.b', description: 7, on: ['x'], when } }),
    ).toEqual([
      { pointer: '/rule/id', message: ID_MESSAGE },
      { pointer: '/rule/description', message: 'description must be a string' },
    ]);
    expect(
      problemsOf({ op: 'upsert-rule', rule: { id: 'ok', description: 'd', on: ['x'], when } }),
    ).toEqual([]);
  });

  it('a model', () => {
    const lookup = { kind: 'lookup', values: ['c-1'] };
    expect(
      problemsOf({ op: 'upsert-model', model: { id: '', description: [], ...lookup } }),
    ).toEqual([
      { pointer: '/model/id', message: ID_MESSAGE },
      { pointer: '/model/description', message: 'description must be a string' },
    ]);
    expect(
      problemsOf({ op: 'upsert-model', model: { id: 'ok', description: 'd', ...lookup } }),
    ).toEqual([]);
  });
});

describe('an unknown property is named with where it was found and what is allowed there', () => {
  it('in a pattern and in an alert', () => {
    const when = { all: [{ fact: 'n', operator: 'equal', value: 1 }] };
    const pattern = {
      kind: 'threshold',
      aggregate: 'count',
      window: '1m',
      operator: '>=',
      value: 2,
    };
    expect(
      problemsOf({
        op: 'upsert-rule',
        rule: {
          id: 'r',
          on: ['x'],
          when,
          pattern: { ...pattern, windw: '5m' },
          alert: { severty: 'high' },
        },
      }),
    ).toEqual([
      {
        pointer: '/rule/pattern/windw',
        message:
          'unknown property "windw" in a threshold pattern; a threshold pattern has kind, aggregate, field, window, windowType, operator, value',
      },
      {
        pointer: '/rule/alert/severty',
        message:
          'unknown property "severty" in a rule\'s alert; a rule\'s alert has severity, title, suppressFor',
      },
    ]);
  });
});
