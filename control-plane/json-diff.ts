/** One difference between two JSON values, at a JSON pointer (RFC 6901). */
export type JsonChange =
  | { readonly op: 'add'; readonly path: string; readonly after: unknown }
  | { readonly op: 'remove'; readonly path: string; readonly before: unknown }
  | {
      readonly op: 'replace';
      readonly path: string;
      readonly before: unknown;
      readonly after: unknown;
    };

const token = (t: string | number): string => String(t).replace(/~/g, '~0').replace(/\//g, '~1');

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * The differences from `before` to `after`, deepest first where they can be told apart: objects
 * compare by key (sorted, so the result does not depend on key order), arrays by index. A value
 * that changes type is one `replace`.
 */
export function jsonDiff(before: unknown, after: unknown, path = ''): JsonChange[] {
  if (before === undefined && after === undefined) return [];
  if (before === undefined) return [{ op: 'add', path, after }];
  if (after === undefined) return [{ op: 'remove', path, before }];
  if (isObject(before) && isObject(after)) {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
    return keys.flatMap((k) =>
      jsonDiff(
        Object.hasOwn(before, k) ? before[k] : undefined,
        Object.hasOwn(after, k) ? after[k] : undefined,
        `${path}/${token(k)}`,
      ),
    );
  }
  if (Array.isArray(before) && Array.isArray(after)) {
    const out: JsonChange[] = [];
    for (let i = 0; i < Math.max(before.length, after.length); i++)
      out.push(...jsonDiff(before[i], after[i], `${path}/${i}`));
    return out;
  }
  return Object.is(before, after) ? [] : [{ op: 'replace', path, before, after }];
}
