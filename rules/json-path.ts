/**
 * The subset of JSONPath that conditions may use: `$`, then `.name`, `[0]` or `['name']` segments.
 * json-rules-engine resolves `path` with jsonpath-plus; filters, wildcards, unions and recursive
 * descent are slow and can run script, so they are refused at validation. On the accepted subset
 * this resolver gives exactly jsonpath-plus's answer (the differential test checks it).
 */

/** Property names that could reach an object's prototype; refused in facts, paths and fields. */
export const FORBIDDEN_NAMES: ReadonlySet<string> = new Set([
  '__proto__',
  'constructor',
  'prototype',
]);

const SEGMENT = /^(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\['([A-Za-z0-9_ -]+)'\])/;

/** Parses a path into its segments, or returns a sentence saying how to fix it. */
export function parsePath(
  path: string,
): { ok: true; segments: string[] } | { ok: false; message: string } {
  if (!path.startsWith('$')) {
    return {
      ok: false,
      message: `path "${path}" must start with "$", e.g. "$.amount" or "$.items[0].price"`,
    };
  }
  const segments: string[] = [];
  let rest = path.slice(1);
  while (rest.length > 0) {
    const m = SEGMENT.exec(rest);
    if (!m) {
      return {
        ok: false,
        message: `path "${path}" is not a plain path at "${rest}": use only ".name", "[index]" or "['name']" segments (filters, wildcards and ".." are not allowed)`,
      };
    }
    const name = m[1] ?? m[2] ?? m[3] ?? '';
    if (FORBIDDEN_NAMES.has(name)) {
      return {
        ok: false,
        message: `path "${path}" names "${name}", which is not allowed; use another property name`,
      };
    }
    segments.push(name);
    rest = rest.slice(m[0].length);
  }
  return { ok: true, segments };
}

/** Resolves parsed segments in `value` as jsonpath-plus does on plain paths: own properties only. */
export function resolveSegments(value: unknown, segments: readonly string[]): unknown {
  let current = value;
  for (const name of segments) {
    // jsonpath-plus follows a property only when the value is truthy and has it as an own property.
    if (!current || !Object.hasOwn(current as object, name)) return undefined;
    current = (current as Record<string, unknown>)[name];
  }
  return current;
}
