import { Engine } from 'json-rules-engine';
import { lookupFact, type CompiledModel } from '../../rules/index.js';

/** json-rules-engine's verdict: fired, not fired, or the run rejected. */
export type Verdict = true | false | 'error';

/**
 * A json-rules-engine 7.x Engine holding one rule with `conditions`, set up as the reference for
 * Vigil's semantics: missing facts are undefined (`allowUndefinedFacts`), models and lookups are
 * dynamic facts. One Engine per run: an Engine must not run two evaluations at once.
 */
export function jreEngine(
  conditions: unknown,
  facts: Record<string, unknown>,
  models: ReadonlyMap<string, CompiledModel> = new Map(),
): Engine {
  const engine = new Engine([], { allowUndefinedFacts: true });
  for (const [id, m] of models) {
    if (m.kind === 'scorer') engine.addFact(`model:${id}`, () => m.score(facts));
    else
      engine.addFact(`list:${id}`, (params: Record<string, unknown>) =>
        lookupFact(m, facts, typeof params?.key === 'string' ? params.key : undefined),
      );
  }
  engine.addRule({ conditions: structuredClone(conditions) as never, event: { type: 'fired' } });
  return engine;
}

/** Runs one condition tree through json-rules-engine (see {@link jreEngine}). */
export async function jreVerdict(
  conditions: unknown,
  facts: Record<string, unknown>,
  models: ReadonlyMap<string, CompiledModel> = new Map(),
): Promise<Verdict> {
  const engine = jreEngine(conditions, facts, models);
  try {
    const { events } = await engine.run(facts);
    return events.length === 1;
  } catch {
    return 'error';
  }
}
