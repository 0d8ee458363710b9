import fc from 'fast-check';
import {
  applyControl,
  type PartitionRecord,
  type ProcessResult,
  type RuleSet,
} from '../../rules/index.js';
import { ruleSetOf } from './harness.js';

/**
 * Random partition logs for property tests: a rule mix with every operator (sliding, tumbling,
 * distinct, max, avg, sequence, absence, suppression), rule-set versions with compatible and
 * incompatible changes, and records (events in and out of order, ticks, markers, garbage).
 */
export const rules = [
  {
    id: 'velocity',
    on: ['payment'],
    key: 'card',
    pattern: { kind: 'threshold', aggregate: 'count', window: 300, operator: '>=', value: 3 },
    alert: { suppressFor: 100, title: 'velocity on {{card}}' },
  },
  {
    id: 'spend',
    on: ['payment'],
    pattern: {
      kind: 'threshold',
      aggregate: 'sum',
      field: 'amount',
      window: 200,
      windowType: 'tumbling',
      operator: '>',
      value: 12,
    },
    alert: { suppressFor: 150 },
  },
  {
    id: 'distinct-cards',
    on: ['payment'],
    pattern: {
      kind: 'threshold',
      aggregate: 'distinct',
      field: 'card',
      window: 500,
      operator: '>=',
      value: 2,
    },
  },
  {
    id: 'peak',
    on: ['payment'],
    pattern: {
      kind: 'threshold',
      aggregate: 'max',
      field: 'amount',
      window: 150,
      operator: '>=',
      value: 18,
    },
  },
  {
    id: 'login-pay',
    on: ['login', 'payment'],
    pattern: {
      kind: 'sequence',
      within: 400,
      steps: [
        { name: 'l', on: ['login'] },
        {
          name: 'p',
          on: ['payment'],
          times: 2,
          when: {
            all: [
              {
                fact: 'amount',
                operator: 'greaterThan',
                value: { fact: 'step:l', path: '$.limit' },
              },
            ],
          },
        },
      ],
    },
  },
  {
    id: 'unconfirmed',
    on: ['order'],
    pattern: { kind: 'absence', within: 250, expect: { on: ['confirm'] } },
  },
  {
    // A small window (see small-window.ts) per card, deleted by the second version.
    id: 'avg-spend',
    on: ['payment'],
    key: 'card',
    pattern: {
      kind: 'threshold',
      aggregate: 'avg',
      field: 'amount',
      window: 250,
      operator: '>=',
      value: 15,
    },
  },
  {
    id: 'big',
    on: ['payment'],
    when: { all: [{ fact: 'amount', operator: 'greaterThanInclusive', value: 19 }] },
    alert: { suppressFor: 50 },
  },
  {
    // A composite key: its state is per (card, type) pair.
    id: 'card-type',
    on: ['payment', 'login'],
    key: ['card', 'type'],
    pattern: { kind: 'threshold', aggregate: 'count', window: 150, operator: '>=', value: 2 },
    alert: { title: 'twice {{type}} on {{card}}: {{key}}' },
  },
];

/**
 * Rule-set versions: the first, then a mix of compatible and incompatible changes, a
 * clear-state, a resume. `stateTtl`, given, is set on every rule.
 */
export function versions(stateTtl?: number): RuleSet[] {
  const all =
    stateTtl === undefined
      ? rules
      : (rules.map((r) => ({ ...r, stateTtl })) as unknown as typeof rules);
  const v1 = ruleSetOf({ op: 'replace-all', rules: all });
  const o2 = applyControl(
    v1,
    {
      op: 'changeset',
      changes: [
        { op: 'upsert-rule', rule: { ...all[0], pattern: { ...all[0]?.pattern, value: 2 } } },
        {
          op: 'upsert-rule',
          rule: { ...all[1], pattern: { ...all[1]?.pattern, window: 100 } },
        },
        { op: 'delete-rule', id: 'peak' },
        { op: 'delete-rule', id: 'avg-spend' },
        { op: 'pause-rule', id: 'unconfirmed' },
      ],
    },
    2,
  );
  if (!o2.ok) throw new Error(JSON.stringify(o2.problems));
  const o3 = applyControl(o2.ruleSet, { op: 'clear-state', ruleId: 'login-pay' }, 3);
  if (!o3.ok) throw new Error(JSON.stringify(o3.problems));
  const o4 = applyControl(o3.ruleSet, { op: 'resume-rule', id: 'unconfirmed' }, 4);
  if (!o4.ok) throw new Error(JSON.stringify(o4.problems));
  return [v1, o2.ruleSet, o3.ruleSet, o4.ruleSet];
}

export const step = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.record({
      kind: fc.constant('event' as const),
      type: fc.constantFrom('payment', 'login', 'order', 'confirm', 'other'),
      key: fc.constantFrom('k1', 'k2', 'k3'),
      card: fc.constantFrom('c1', 'c2', 'c3'),
      amount: fc.oneof(fc.integer({ min: 1, max: 20 }), fc.constant('x' as unknown as number)),
      limit: fc.integer({ min: 0, max: 15 }),
      dt: fc.integer({ min: -60, max: 90 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('tick' as const),
      dt: fc.integer({ min: 0, max: 400 }),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'marker' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'garbage' as const }) },
);

export type Step = typeof step extends fc.Arbitrary<infer T> ? T : never;

export function toRecords(steps: Step[], sets: RuleSet[]): PartitionRecord[] {
  let clock = 1000;
  let version = 0;
  return steps.flatMap((s, i): PartitionRecord[] => {
    const seq = i + 1;
    switch (s.kind) {
      case 'event': {
        clock += Math.max(s.dt, 0);
        const ts = clock + Math.min(s.dt, 0);
        return [
          {
            kind: 'event',
            seq,
            key: s.key,
            publishTs: ts,
            data: JSON.stringify({
              type: s.type,
              card: s.card,
              amount: s.amount,
              limit: s.limit,
              ts,
              id: `e${seq}`,
            }),
          },
        ];
      }
      case 'tick':
        clock += s.dt;
        return [{ kind: 'tick', seq, ts: clock }];
      case 'marker':
        version = Math.min(version + 1, sets.length - 1);
        return [{ kind: 'marker', seq, ruleSet: sets[version] as RuleSet }];
      case 'garbage':
        return [{ kind: 'event', seq, key: 'k1', publishTs: 0, data: '{"type": ' }];
    }
  });
}

export function outputs(results: ProcessResult[]): string {
  return JSON.stringify(
    results.map((r) => ({ ...r, errors: r.errors.map((e) => [e.seq, e.ruleId, e.error.message]) })),
  );
}
