/** Checks of a parsed JSON value that every validator makes, written once. */

/** Whether `v` is a JSON object: not null, not an array. */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
