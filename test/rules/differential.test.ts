import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compileCondition, evalContext } from '../../rules/index.js';
import { jreVerdict, type Verdict } from './jre-reference.js';
import { factsArb, models, topArb, validate } from './condition-arbitraries.js';

function vigilVerdict(tree: unknown, facts: Record<string, unknown>): Verdict {
  const compiled = compileCondition(tree as never);
  try {
    return compiled(evalContext(facts, models));
  } catch {
    return 'error';
  }
}

describe('compiled evaluator vs json-rules-engine (differential)', () => {
  it('gives the same verdict on 10,000 random condition trees and fact objects', async () => {
    const stats = { compared: 0, refused: 0, true: 0, false: 0, error: 0 };
    await fc.assert(
      fc.asyncProperty(topArb, factsArb, async (tree, facts) => {
        if (validate(tree).length > 0) {
          stats.refused++;
          return;
        }
        const expected = await jreVerdict(tree, facts, models);
        const actual = vigilVerdict(tree, facts);
        stats.compared++;
        stats[String(expected) as 'true' | 'false' | 'error']++;
        expect(actual).toBe(expected);
      }),
      { numRuns: 18_000 },
    );
    console.log(`differential: ${JSON.stringify(stats)}`);
    // The generator must exercise every outcome, and validation must refuse only a minority.
    expect(stats.compared).toBeGreaterThanOrEqual(10_000);
    expect(stats.true).toBeGreaterThan(1000);
    expect(stats.false).toBeGreaterThan(1000);
    expect(stats.error).toBeGreaterThan(10);
  });
});
