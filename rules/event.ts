import { isHostileObject } from './compile-condition.js';
import type { RuleLimits } from './limits.js';

/** Why an event could not be judged. Each goes to the DLQ with the original payload. */
export const InvalidReason = {
  tooLarge: 'too-large',
  notJson: 'not-json',
  notObject: 'not-object',
  missingType: 'missing-type',
  badTs: 'bad-ts',
  /** A tick whose time is beyond the future limit of the time the log stored it. */
  badTick: 'bad-tick',
  /** A forwarded record or source report (re-keying hop) from no source of the partition, or at a partition of the event log. */
  badForward: 'bad-forward',
  forbiddenField: 'forbidden-field',
  tooDeep: 'too-deep',
  badNumber: 'bad-number',
} as const;
export type InvalidReason = (typeof InvalidReason)[keyof typeof InvalidReason];

/** A parsed event: its fields, event time and optional id. */
export interface ParsedEvent {
  readonly ok: true;
  readonly event: Readonly<Record<string, unknown>>;
  readonly type: string;
  readonly ts: number;
  readonly id: string | undefined;
  /** The event holds a hostile object (see `hasHostileObject`): conditions are evaluated exhaustively. */
  readonly hostile: boolean;
  /**
   * The JSON text parsed, when the payload was bytes or well-formed text: an exact copy of the
   * event, as UTF-8 carries it (a lone surrogate would not survive a store). Otherwise undefined.
   */
  readonly text: string | undefined;
}

export type ParseEventResult =
  ParsedEvent | { readonly ok: false; readonly reason: InvalidReason; readonly message: string };

/** Nesting deeper than this is refused: recursion over such values (JSON.stringify, snapshots) could overflow the stack. */
export const MAX_EVENT_DEPTH = 32;

const decoder = new TextDecoder();
/** `String.prototype.isWellFormed` (Node 20; not in the ES2023 typings). */
type WellFormed = { isWellFormed(): boolean };
const encoder = new TextEncoder();
/** RFC 3339 with an explicit zone: the same instant on every machine, whatever its time zone. */
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$/;

function eventTime(v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isSafeInteger(v) && v >= 0 ? v : undefined;
  if (typeof v === 'string' && RFC3339.test(v)) {
    const t = Date.parse(v);
    return Number.isSafeInteger(t) && t >= 0 ? t : undefined;
  }
  return undefined;
}

function fail(reason: InvalidReason, message: string): ParseEventResult {
  return { ok: false, reason, message };
}

/** Set by {@link checkValue} when it meets a hostile object (see `isHostileObject`). */
let sawHostile = false;

/**
 * Checks nesting depth and that every number is finite (JSON.parse turns 1e400 into Infinity, which
 * JSON cannot carry back); notes hostile objects on the way (see `hasHostileObject`), so
 * conditions know in the same walk whether they may short-circuit.
 */
function checkValue(v: unknown, depth: number): InvalidReason | undefined {
  if (typeof v === 'number') return Number.isFinite(v) ? undefined : InvalidReason.badNumber;
  if (typeof v !== 'object' || v === null) return undefined;
  if (depth >= MAX_EVENT_DEPTH) return InvalidReason.tooDeep;
  if (Array.isArray(v)) {
    for (const x of v) {
      const bad = checkValue(x, depth + 1);
      if (bad !== undefined) return bad;
    }
    return undefined;
  }
  if (isHostileObject(v)) sawHostile = true;
  // Own enumerable values, as for-in with a hasOwn test per key would give, in the same order,
  // at about half that loop's cost per event (bench/README.md).
  const values = Object.values(v);
  for (let i = 0; i < values.length; i++) {
    const bad = checkValue(values[i], depth + 1);
    if (bad !== undefined) return bad;
  }
  return undefined;
}

/**
 * Parses and checks one event payload: a JSON object of at most `maxEventBytes`,
 * nested at most {@link MAX_EVENT_DEPTH} deep, with finite numbers, a string `type`, an optional
 * `id`, and an optional `ts` (integer ms since the epoch, or RFC 3339 with a zone; default
 * `publishTs`) at most `maxEventFutureMs` after `publishTs`. Top-level fields `__proto__`,
 * `constructor` and `prototype` are refused.
 */
export function parseEvent(data: unknown, publishTs: number, limits: RuleLimits): ParseEventResult {
  let obj: unknown = data;
  let text: string | undefined;
  if (typeof data === 'string' || data instanceof Uint8Array) {
    const size =
      typeof data === 'string'
        ? data.length * 3 <= limits.maxEventBytes
          ? data.length
          : encoder.encode(data).byteLength
        : data.byteLength;
    if (size > limits.maxEventBytes)
      return fail(
        InvalidReason.tooLarge,
        `event is ${size} bytes, over the limit of ${limits.maxEventBytes}`,
      );
    try {
      const json = typeof data === 'string' ? data : decoder.decode(data);
      obj = JSON.parse(json);
      // Decoded bytes are always well formed (TextDecoder replaces bad sequences).
      if (typeof data !== 'string' || (data as unknown as WellFormed).isWellFormed()) text = json;
    } catch (e) {
      return fail(InvalidReason.notJson, `event is not JSON: ${(e as Error).message}`);
    }
  }
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj))
    return fail(
      InvalidReason.notObject,
      'event must be a JSON object such as {"type": "payment", ...}',
    );
  const event = obj as Record<string, unknown>;
  if (
    Object.hasOwn(event, '__proto__') ||
    Object.hasOwn(event, 'constructor') ||
    Object.hasOwn(event, 'prototype')
  ) {
    return fail(
      InvalidReason.forbiddenField,
      'event has a field named __proto__, constructor or prototype; rename it',
    );
  }
  sawHostile = false;
  const bad = checkValue(event, 0);
  const hostile = sawHostile;
  if (bad === InvalidReason.tooDeep)
    return fail(bad, `event is nested deeper than ${MAX_EVENT_DEPTH} levels; flatten it`);
  if (bad === InvalidReason.badNumber)
    return fail(
      bad,
      'event holds a number too large for a double (JSON.parse makes it Infinity); send it as a string',
    );
  const type = event.type;
  if (typeof type !== 'string' || type.length === 0)
    return fail(InvalidReason.missingType, 'event needs a non-empty string field "type"');
  let ts = publishTs;
  if (Object.hasOwn(event, 'ts') && event.ts !== undefined && event.ts !== null) {
    const t = eventTime(event.ts);
    if (t === undefined)
      return fail(
        InvalidReason.badTs,
        `event "ts" must be integer milliseconds since the epoch or an RFC 3339 time with a zone (e.g. 2026-11-29T10:00:00Z), got ${JSON.stringify(event.ts)}`,
      );
    if (t > publishTs + limits.maxEventFutureMs) {
      return fail(
        InvalidReason.badTs,
        `event "ts" ${t} is more than ${limits.maxEventFutureMs} ms after the time it was published (${publishTs}); a clock that far ahead would make the partition's later events late`,
      );
    }
    ts = t;
  }
  const rawId = event.id;
  const id =
    typeof rawId === 'string' ? rawId : typeof rawId === 'number' ? String(rawId) : undefined;
  return { ok: true, event, type, ts, id, hostile, text };
}

/**
 * Why an event is late, for its dead letter: its time and the watermark it missed, and what to
 * do. A `ts` in seconds (a common producer mistake) is far behind any watermark in milliseconds
 * and is said to be so, rather than advising a larger out-of-orderness.
 */
export function lateMessage(ts: number, watermark: number): string {
  const base = `event time ${ts} is at or before the partition's watermark ${watermark}`;
  return ts < 1e11 && Math.abs(ts * 1000 - watermark) < 366 * 86_400_000
    ? `${base}; "ts" looks like seconds since the epoch where milliseconds are expected (send ${ts * 1000})`
    : `${base}; it reached the log more than VIGIL_OUT_OF_ORDER_MS after events of its partition that were on time: raise VIGIL_OUT_OF_ORDER_MS if such delays are normal, or fix the producer's clock`;
}
