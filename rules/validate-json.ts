/** Checks of a parsed JSON value that every validator makes, written once. */
import type { Problem } from './errors.js';

/** Whether `v` is a JSON object: not null, not an array. */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Whether `v` is a JSON object; when it is not, records `message` as the problem at `at` (the
 * validator then has nothing inside it to check).
 */
export function objectAt(
  v: unknown,
  at: string,
  message: string,
  problems: Problem[],
): v is Record<string, unknown> {
  if (isObject(v)) return true;
  problems.push({ pointer: at, message });
  return false;
}

/** Whether `v` is a non-empty array; when it is not, records `message` as the problem at `at`. */
export function nonEmptyArrayAt(
  v: unknown,
  at: string,
  message: string,
  problems: Problem[],
): v is unknown[] {
  if (Array.isArray(v) && v.length > 0) return true;
  problems.push({ pointer: at, message });
  return false;
}
