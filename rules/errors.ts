/**
 * Error classes of the rules core. Every error has a stable `code` (`VIGIL_E…`) and says whether
 * retrying the same call can help (`retryable`): nothing in `rules/` does I/O, so none can.
 */

import { codesOf, ERROR_CODES, ErrorCode } from './error-codes.js';

/** A problem found by validation: where it is (a JSON pointer) and how to fix it. */
export interface Problem {
  /** JSON pointer (RFC 6901) into the validated document, e.g. `/rule/when/all/0/operator`. */
  readonly pointer: string;
  /** One sentence that says what is wrong and how to fix it. */
  readonly message: string;
}

/** Stable error codes of the rules core (from the one catalogue, `ERROR_CODES`). */
export const RulesErrorCode = codesOf('Validation', 'RuleEvaluation', 'Snapshot');
export type RulesErrorCode = (typeof RulesErrorCode)[keyof typeof RulesErrorCode];

/** Options every Vigil error takes. */
export interface VigilErrorOptions {
  /** Whether trying again later can help; by default what the catalogue says of the code. */
  readonly retryable?: boolean;
  /** The error this one reports. */
  readonly cause?: unknown;
}

/** Base class of every Vigil error. */
export class VigilError extends Error {
  override name = 'VigilError';
  readonly code: ErrorCode;
  readonly retryable: boolean;

  constructor(code: ErrorCode, message: string, options: VigilErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    // A code whose errors differ ('depends') is retryable only when the error says so.
    this.retryable = options.retryable ?? ERROR_CODES[code].retryable === true;
  }
}

/** A rule, model, control message or option set is not valid; `problems` lists every problem found. */
export class ValidationError extends VigilError {
  override name = 'ValidationError';
  readonly problems: readonly Problem[];

  constructor(what: string, problems: readonly Problem[]) {
    const first = problems[0];
    const summary = first
      ? ` (${first.pointer || '/'}: ${first.message}${problems.length > 1 ? ` and ${problems.length - 1} more` : ''})`
      : '';
    super(RulesErrorCode.Validation, `${what} is not valid${summary}`);
    this.problems = problems;
  }
}

/** A rule's condition threw while judging one event (json-rules-engine would reject the run too). */
export class RuleEvaluationError extends VigilError {
  override name = 'RuleEvaluationError';
  readonly ruleId: string;

  constructor(ruleId: string, cause: unknown) {
    const detail = cause instanceof Error ? cause.message : String(cause);
    super(RulesErrorCode.RuleEvaluation, `rule "${ruleId}" failed on this event: ${detail}`, {
      cause,
    });
    this.ruleId = ruleId;
  }
}

/** A snapshot could not be restored: corrupt bytes, unknown format, or a rule set it needs is missing. */
export class SnapshotError extends VigilError {
  override name = 'SnapshotError';

  constructor(message: string, cause?: unknown) {
    super(RulesErrorCode.Snapshot, message, { cause });
  }
}

/** Escapes one JSON-pointer token (RFC 6901). */
export function pointerToken(token: string | number): string {
  return String(token).replace(/~/g, '~0').replace(/\//g, '~1');
}

/** Joins a base pointer and tokens into a JSON pointer. */
export function pointer(base: string, ...tokens: (string | number)[]): string {
  return tokens.reduce<string>((p, t) => `${p}/${pointerToken(t)}`, base);
}
