import { ValidationError, type Problem } from './errors.js';

/**
 * Bounds on what a rule set may ask of a partition. Validation refuses anything past them, so a
 * single bad change can never exhaust a shard's memory or CPU.
 */
export interface RuleLimits {
  /** Deepest nesting of `all`/`any`/`not` in one condition tree. Default 8. */
  readonly maxConditionDepth: number;
  /** Most leaf conditions in one rule (all conditions of all its steps). Default 64. */
  readonly maxConditions: number;
  /** Longest window, `within` or `suppressFor`, in milliseconds. Default 7 days. */
  readonly maxWindowMs: number;
  /** Most rules in one rule set. Default 10,000. */
  readonly maxRules: number;
  /** Most models and lookup tables in one rule set. Default 1,000. */
  readonly maxModels: number;
  /** Largest event payload, in bytes. Default 64 KiB. */
  readonly maxEventBytes: number;
  /** How far an event's `ts` may be ahead of the time it was published, in ms. Default 5 minutes. */
  readonly maxEventFutureMs: number;
  /** Largest control message, in bytes. Default 8 MiB. */
  readonly maxControlBytes: number;
  /** Most entries of one lookup table. Default 1,000,000. */
  readonly maxLookupEntries: number;
  /** Most values in one literal array of a condition. Default 10,000. */
  readonly maxValueArrayLength: number;
  /** Most events one key keeps in one sliding window; older ones are evicted and reported. Default 100,000. */
  readonly maxWindowEntriesPerKey: number;
  /** Most partial matches (sequence) or pending triggers (absence) per rule and key. Default 1,000. */
  readonly maxPendingPerKey: number;
  /** Most steps of one sequence pattern. Default 16. */
  readonly maxSteps: number;
  /** Largest `times` of one sequence step. Default 1,000. */
  readonly maxTimes: number;
}

/** The defaults of {@link RuleLimits}. */
export const DEFAULT_LIMITS: RuleLimits = Object.freeze({
  maxConditionDepth: 8,
  maxConditions: 64,
  maxWindowMs: 7 * 24 * 3600_000,
  maxRules: 10_000,
  maxModels: 1_000,
  maxEventBytes: 64 * 1024,
  maxEventFutureMs: 5 * 60_000,
  maxControlBytes: 8 * 1024 * 1024,
  maxLookupEntries: 1_000_000,
  maxValueArrayLength: 10_000,
  maxWindowEntriesPerKey: 100_000,
  maxPendingPerKey: 1_000,
  maxSteps: 16,
  maxTimes: 1_000,
});

/**
 * Merges partial limits over the defaults and validates them once.
 * @throws ValidationError naming each setting that is not a positive integer.
 */
export function resolveLimits(partial: Partial<RuleLimits> = {}): RuleLimits {
  const merged: Record<string, unknown> = { ...DEFAULT_LIMITS };
  const problems: Problem[] = [];
  for (const [name, value] of Object.entries(partial)) {
    if (!Object.hasOwn(DEFAULT_LIMITS, name)) {
      problems.push({
        pointer: `/${name}`,
        message: `unknown limit "${name}"; known limits are ${Object.keys(DEFAULT_LIMITS).join(', ')}`,
      });
      continue;
    }
    if (value === undefined) continue;
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
      problems.push({
        pointer: `/${name}`,
        message: `limit "${name}" must be a positive integer, got ${JSON.stringify(value)}`,
      });
      continue;
    }
    merged[name] = value;
  }
  if (problems.length > 0) throw new ValidationError('rule limits', problems);
  return Object.freeze(merged) as unknown as RuleLimits;
}
