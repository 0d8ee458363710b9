/**
 * A rule's `key`: one field or a list of fields whose values key the rule's state. Every reader
 * of an event's key (the live path, explain, key coverage) goes through {@link keyValue}, so a
 * composite key reads the same everywhere.
 */

/** The fields of a rule's `key` as a list; undefined when the rule is keyed by the partition key. */
export function keyFieldsOf(
  key: string | readonly string[] | undefined,
): readonly string[] | undefined {
  return key === undefined ? undefined : typeof key === 'string' ? [key] : key;
}

/** A field's value as a key: a string as it is, a finite number as its text; otherwise undefined. */
function keyPart(event: Readonly<Record<string, unknown>>, field: string): string | undefined {
  const v = Object.hasOwn(event, field) ? event[field] : undefined;
  return typeof v === 'string'
    ? v
    : typeof v === 'number' && Number.isFinite(v)
      ? String(v)
      : undefined;
}

/**
 * The key of `event` under `fields`: one field's value as text; for several, the JSON array of
 * their texts (`["p1","b9"]`), which no other list of values writes. Undefined when a field is
 * missing or holds neither a string nor a finite number: the event does not meet the rule.
 */
export function keyValue(
  fields: readonly string[],
  event: Readonly<Record<string, unknown>>,
): string | undefined {
  if (fields.length === 1) return keyPart(event, fields[0] as string);
  const parts: string[] = [];
  for (const f of fields) {
    const part = keyPart(event, f);
    if (part === undefined) return undefined;
    parts.push(part);
  }
  return JSON.stringify(parts);
}

/** Whether two rules' `key`s key state alike (the same fields in the same order). */
export function sameKeyFields(
  a: string | readonly string[] | undefined,
  b: string | readonly string[] | undefined,
): boolean {
  const fa = keyFieldsOf(a);
  const fb = keyFieldsOf(b);
  if (fa === undefined || fb === undefined) return fa === fb;
  return fa.length === fb.length && fa.every((f, i) => f === fb[i]);
}

const TOKEN_FIELD = /^[A-Za-z0-9_-]{1,40}$/;

/**
 * The name of the key space of a rule keyed by `fields`: the rules keyed by the same fields in the
 * same order share it, and their events are re-keyed to its partitions. One subject token: the
 * fields joined by `~` when each is a plain name (`beneficiary`, `card~type`), otherwise `=` and
 * a 64-bit hash of the list (`=` and `~` are in no plain name, so the two forms never meet).
 */
export function keySpaceOf(fields: readonly string[]): string {
  if (fields.every((f) => TOKEN_FIELD.test(f))) return fields.join('~');
  // Two FNV-1a passes with different offsets over the JSON list: stable across processes.
  const text = JSON.stringify(fields);
  let a = 0x811c9dc5;
  let b = 0x01000193;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193) >>> 0;
    b = Math.imul(b ^ c, 0x01000193) >>> 0;
  }
  return `=${a.toString(16).padStart(8, '0')}${b.toString(16).padStart(8, '0')}`;
}
