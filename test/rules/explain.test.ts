import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  compileRule,
  explainCondition,
  explainRule,
  type ExplainedCondition,
} from '../../rules/index.js';
import { jreEngine, jreVerdict } from './jre-reference.js';
import { factsArb, models, topArb, validate } from './condition-arbitraries.js';

/** json-rules-engine's result tree (`RuleResult.toJSON`), or 'error' when its run rejects. */
async function jreTree(conditions: unknown, facts: Record<string, unknown>): Promise<unknown> {
  const engine = jreEngine(conditions, facts, models);
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
