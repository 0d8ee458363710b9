import type { RuleLimits } from './limits.js';

/** Why an event could not be judged. Each goes to the DLQ with the original payload. */
export const InvalidReason = {
  tooLarge: 'too-large',
  notJson: 'not-json',
  notObject: 'not-object',
  missingType: 'missing-type',
  badTs: 'bad-ts',
  forbiddenField: 'forbidden-field',
} as const;
export type InvalidReason = (typeof InvalidReason)[keyof typeof InvalidReason];

/** A parsed event: its fields, event time and optional id. */
export interface ParsedEvent {
  readonly ok: true;
  readonly event: Readonly<Record<string, unknown>>;
  readonly type: string;
  readonly ts: number;
  readonly id: string | undefined;
}

export type ParseEventResult =
  ParsedEvent | { readonly ok: false; readonly reason: InvalidReason; readonly message: string };

const decoder = new TextDecoder();
const encoder = new TextEncoder();

function eventTime(v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isSafeInteger(v) && v >= 0 ? v : undefined;
  if (typeof v === 'string') {
    const t = Date.parse(v);
    return Number.isSafeInteger(t) && t >= 0 ? t : undefined;
  }
  return undefined;
}

/**
 * Parses and checks one event payload (DESIGN §3): a JSON object of at most `maxEventBytes` with a
 * string `type`, an optional `id`, and an optional `ts` (integer ms since the epoch or ISO-8601;
 * default: `publishTs`). Top-level fields `__proto__`, `constructor` and `prototype` are refused.
 */
export function parseEvent(data: unknown, publishTs: number, limits: RuleLimits): ParseEventResult {
  let obj: unknown = data;
  if (typeof data === 'string' || data instanceof Uint8Array) {
    const size = typeof data === 'string' ? encoder.encode(data).byteLength : data.byteLength;
    if (size > limits.maxEventBytes)
      return {
        ok: false,
        reason: InvalidReason.tooLarge,
        message: `event is ${size} bytes, over the limit of ${limits.maxEventBytes}`,
      };
    try {
      obj = JSON.parse(typeof data === 'string' ? data : decoder.decode(data));
    } catch (e) {
      return {
        ok: false,
        reason: InvalidReason.notJson,
        message: `event is not JSON: ${(e as Error).message}`,
      };
    }
  }
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) {
    return {
      ok: false,
      reason: InvalidReason.notObject,
      message: 'event must be a JSON object such as {"type": "payment", ...}',
    };
  }
  const event = obj as Record<string, unknown>;
  if (
    Object.hasOwn(event, '__proto__') ||
    Object.hasOwn(event, 'constructor') ||
    Object.hasOwn(event, 'prototype')
  ) {
    return {
      ok: false,
      reason: InvalidReason.forbiddenField,
      message: 'event has a field named __proto__, constructor or prototype; rename it',
    };
  }
  const type = event.type;
  if (typeof type !== 'string' || type.length === 0) {
    return {
      ok: false,
      reason: InvalidReason.missingType,
      message: 'event needs a non-empty string field "type"',
    };
  }
  let ts = publishTs;
  if (Object.hasOwn(event, 'ts') && event.ts !== undefined && event.ts !== null) {
    const t = eventTime(event.ts);
    if (t === undefined)
      return {
        ok: false,
        reason: InvalidReason.badTs,
        message: `event "ts" must be integer milliseconds since the epoch or an ISO-8601 time, got ${JSON.stringify(event.ts)}`,
      };
    ts = t;
  }
  const rawId = event.id;
  const id =
    typeof rawId === 'string' ? rawId : typeof rawId === 'number' ? String(rawId) : undefined;
  return { ok: true, event, type, ts, id };
}
