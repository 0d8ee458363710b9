import { DeadReason, DLQ_HEADERS, Streams } from '../protocol/index.js';
import { ApiError, ApiErrorCode } from './errors.js';
import { queryInt } from './http-support.js';

/** A message of `DLQ` as the reader hands it over: headers with their first value. */
export interface DlqMessage {
  readonly seq: number;
  readonly subject: string;
  /** Store time, ms since the epoch. */
  readonly storedAt: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly data: Uint8Array;
  /** The payload's size when `data` holds only its start (a listing keeps no more than a preview needs). */
  readonly size?: number;
}

/** A dead letter: what was refused, why, and where it came from. */
export interface DeadLetter {
  /** Its sequence in `DLQ`. */
  readonly seq: number;
  readonly storedAt: number;
  readonly reason: string;
  readonly error: string;
  readonly source?: { readonly stream: string; readonly subject: string; readonly seq: number };
  readonly ruleId?: string;
  /** The dead letter's own `Nats-Msg-Id` (stable: the service reports a letter again under it). */
  readonly id?: string;
  /** The original payload (its start only when read for a listing: see {@link DlqMessage.size}). */
  readonly data: Uint8Array;
  readonly size: number;
  /**
   * Headers the producer gave the original message. The sink does not copy them today, so this is
   * empty; a replay passes on whatever it finds here, never Vigil's `Vigil-…` or NATS's `Nats-…`.
   */
  readonly producerHeaders: Readonly<Record<string, string>>;
}

const DLQ_PREFIX = 'vigil.dlq.';

/** A dead letter from a stored `DLQ` message. */
export function deadLetterOf(m: DlqMessage): DeadLetter {
  const h = m.headers;
  const stream = h[DLQ_HEADERS.sourceStream];
  const subject = h[DLQ_HEADERS.sourceSubject];
  const seq = Number(h[DLQ_HEADERS.sourceSeq]);
  const producerHeaders: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (!/^(vigil|nats)-/i.test(k)) producerHeaders[k] = v;
  const ruleId = h[DLQ_HEADERS.rule];
  const id = h['Nats-Msg-Id'];
  return {
    seq: m.seq,
    storedAt: m.storedAt,
    reason:
      h[DLQ_HEADERS.reason] ??
      (m.subject.startsWith(DLQ_PREFIX) ? m.subject.slice(DLQ_PREFIX.length) : m.subject),
    error: h[DLQ_HEADERS.error] ?? '',
    ...(stream !== undefined && subject !== undefined && Number.isSafeInteger(seq)
      ? { source: { stream, subject, seq } }
      : {}),
    ...(ruleId === undefined ? {} : { ruleId }),
    ...(id === undefined ? {} : { id }),
    data: m.data,
    size: m.size ?? m.data.byteLength,
    producerHeaders,
  };
}

/** Longest preview, in characters. */
export const PREVIEW_CHARS = 120;
/** Bytes of a payload a listing keeps for the preview (UTF-8: up to 4 bytes a character). */
export const PREVIEW_BYTES = PREVIEW_CHARS * 4;

const strict = new TextDecoder('utf-8', { fatal: true });
const lenient = new TextDecoder('utf-8');

/** The payload as text, or undefined when it is not UTF-8. */
function textOf(data: Uint8Array): string | undefined {
  try {
    return strict.decode(data);
  } catch {
    return undefined;
  }
}

/**
 * A short line of the payload for people: its text on one line (control characters as spaces),
 * cut at {@link PREVIEW_CHARS} with "…"; a payload that is not text is shown as its size.
 * `size` is the whole payload's when `data` is only its start.
 */
export function preview(data: Uint8Array, size = data.byteLength): string {
  if (size === 0) return '';
  const cut = data.byteLength < size;
  // A start cut in the middle of a character is still text: only the whole is judged strictly.
  const text = cut ? lenient.decode(data).replace(/\uFFFD+$/, '') : textOf(data);
  if (text === undefined || text.includes('\uFFFD')) return `<${size} bytes, not text>`;
  const line = text.replace(/\p{Cc}+/gu, ' ').trim();
  return line.length > PREVIEW_CHARS || cut ? `${line.slice(0, PREVIEW_CHARS - 1)}…` : line;
}

/** How a listing shows payloads: a preview only, or the whole as text (base64 when it is not) or base64. */
export type PayloadMode = 'none' | 'text' | 'base64';

/** A dead letter as the API shows it (`GET /v1/dlq`, one of `letters`). */
export interface LetterView {
  readonly seq: number;
  /** When `DLQ` stored it, ISO 8601. */
  readonly time: string;
  readonly reason: string;
  /** Why it was refused, or "" when the reason says it all. */
  readonly error: string;
  readonly source: {
    readonly stream: string;
    readonly subject: string;
    readonly seq: number;
  } | null;
  readonly rule?: string;
  readonly id?: string;
  readonly size: number;
  readonly preview: string;
  /** The whole payload, when asked for (`payload=text|base64`), as `encoding` says. */
  readonly payload?: string;
  readonly encoding?: 'text' | 'base64';
  /** Asked for, but left out: the answer's payload budget was spent (see routes-dlq.ts). */
  readonly payloadOmitted?: boolean;
}

/** A dead letter as the API shows it. */
export function letterView(l: DeadLetter, payload: PayloadMode): LetterView {
  const view: LetterView = {
    seq: l.seq,
    time: new Date(l.storedAt).toISOString(),
    reason: l.reason,
    error: l.error,
    source: l.source ?? null,
    ...(l.ruleId === undefined ? {} : { rule: l.ruleId }),
    ...(l.id === undefined ? {} : { id: l.id }),
    size: l.size,
    preview: preview(l.data, l.size),
  };
  if (payload === 'none') return view;
  const text = payload === 'text' ? textOf(l.data) : undefined;
  return text === undefined
    ? { ...view, payload: Buffer.from(l.data).toString('base64'), encoding: 'base64' }
    : { ...view, payload: text, encoding: 'text' };
}

/**
 * The `Nats-Msg-Id` of a dead letter's replay: one per `DLQ` sequence, so `EVENTS` stores a
 * letter's replay once within its duplicate window however often it is asked for.
 */
export const replayMsgId = (dlqSeq: number): string => `vigil-dlq-replay-${dlqSeq}`;

/** Where a replay sends a dead letter, or why it cannot. */
export type ReplayTarget =
  { readonly ok: true; readonly subject: string } | { readonly ok: false; readonly why: string };

/**
 * Reasons whose record the same subject can never make valid: it sits where no event belongs (a
 * partition that is not its key's, a reserved key, a subject that is not `events.<key>.<p>`) or
 * is one of Vigil's own records (markers, ticks), which only the service writes. Sent back, it
 * would only come back to `DLQ` — or, for a marker or tick, be written as the service's user,
 * past the permissions that keep producers from writing them.
 */
const NEVER_REPLAYED: ReadonlySet<string> = new Set([
  ...Object.values(DeadReason),
  'forged-marker',
]);

/**
 * A dead letter goes back to the `EVENTS` subject it was read from. A rejected control message is
 * not replayed: it would change rules outside the API's checks and audit; fix it and apply it.
 */
export function replayTarget(l: DeadLetter): ReplayTarget {
  if (NEVER_REPLAYED.has(l.reason))
    return {
      ok: false,
      why: `a ${l.reason} letter is not replayed: its subject can never hold a valid event (or it is one of Vigil's own records); publish the event again to events.<key>`,
    };
  const s = l.source;
  if (s === undefined)
    return {
      ok: false,
      why: 'the dead letter does not say where it came from (no source headers)',
    };
  if (s.stream === Streams.control)
    return {
      ok: false,
      why: 'a rejected control message is not replayed: fix it and apply it through the API (vigil rules apply)',
    };
  if (s.stream !== Streams.events)
    return { ok: false, why: `only dead letters from EVENTS are replayed, not from ${s.stream}` };
  if (
    /[*>]/.test(s.subject) ||
    !s.subject.startsWith('events.') ||
    s.subject.startsWith('events._')
  )
    return {
      ok: false,
      why: `its source subject ${s.subject} names no single subject (the event was judged from the reorder buffer); publish it again to events.<key>`,
    };
  return { ok: true, subject: s.subject };
}

/** A bound of a range of `DLQ`: a sequence, or a store time (ms since the epoch). */
export type Bound =
  { readonly kind: 'seq'; readonly seq: number } | { readonly kind: 'time'; readonly time: number };

const UNIT_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/**
 * Parses a bound as the API takes it: a `DLQ` sequence (digits, or a JSON number), an ISO-8601
 * time (`2026-12-01T10:00:00Z`), or a duration before `now` (`90s`, `15m`, `1h`, `2d`). Undefined
 * when absent; a 400 naming `name` when it is none of these.
 */
export function parseBound(raw: unknown, name: string, now: number): Bound | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw === 'number' && Number.isSafeInteger(raw) && raw >= 0)
    return { kind: 'seq', seq: raw };
  if (typeof raw === 'string') {
    if (/^\d+$/.test(raw) && Number.isSafeInteger(Number(raw)))
      return { kind: 'seq', seq: Number(raw) };
    const d = /^(\d+)(ms|s|m|h|d)$/.exec(raw);
    if (d !== null)
      return { kind: 'time', time: now - Number(d[1]) * (UNIT_MS[d[2] as string] ?? 0) };
    const t = /^\d{4}-\d{2}-\d{2}/.test(raw) ? Date.parse(raw) : NaN;
    if (Number.isFinite(t)) return { kind: 'time', time: t };
  }
  throw new ApiError(
    ApiErrorCode.BadRequest,
    `${name} must be a DLQ sequence (e.g. 42), a time (e.g. 2026-12-01T10:00:00Z) or a duration before now (e.g. 15m, 1h, 2d)`,
    { details: { [name]: raw } },
  );
}

/** What a listing or a replay selects: a range of `DLQ`, filtered by reason and rule. */
export interface DlqFilter {
  /** One reason: read through the subject `vigil.dlq.<reason>`. */
  readonly reason?: string;
  /** Letters that name this rule (`rule-error`). */
  readonly rule?: string;
  readonly since?: Bound;
  readonly until?: Bound;
  /** Letters after this `DLQ` sequence (a cursor). */
  readonly after?: number;
}

/** A listing: the filter, how many, and what to show. */
export interface DlqListQuery extends DlqFilter {
  readonly limit: number;
  readonly payload: PayloadMode;
  /** With `after`: how long to wait for a letter when there is none yet (ms). */
  readonly waitMs: number;
}

export const MAX_LIST = 1000;
export const MAX_WAIT_MS = 30_000;

function str(raw: unknown, name: string, pattern: RegExp, what: string): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string' || !pattern.test(raw))
    throw new ApiError(ApiErrorCode.BadRequest, `${name} must be ${what}`, {
      details: { [name]: raw },
    });
  return raw;
}

/** A reason is one subject token, as the service writes it (`not-json`, `rule-error`, …). */
const REASON = /^[A-Za-z0-9_-]{1,64}$/;
const RULE_ID = /^[^\s]{1,256}$/;

/** The filter of a listing's query string or a replay's body. */
export function parseFilter(q: Record<string, unknown>, now: number): DlqFilter {
  const reason = str(q.reason, 'reason', REASON, 'a dead-letter reason such as not-json or late');
  const rule = str(q.rule, 'rule', RULE_ID, 'a rule id');
  const since = parseBound(q.since, 'since', now);
  const until = parseBound(q.until, 'until', now);
  const after =
    q.after === undefined || q.after === ''
      ? undefined
      : queryInt(q.after, 'after', 0, Number.MAX_SAFE_INTEGER, 0);
  return {
    ...(reason === undefined ? {} : { reason }),
    ...(rule === undefined ? {} : { rule }),
    ...(since === undefined ? {} : { since }),
    ...(until === undefined ? {} : { until }),
    ...(after === undefined ? {} : { after }),
  };
}

/** `GET /v1/dlq`'s query: the filter, `limit` (0 to 1000, default 100), `payload`, `wait`. */
export function parseListQuery(q: Record<string, unknown>, now: number): DlqListQuery {
  const filter = parseFilter(q, now);
  const payload = q.payload ?? 'none';
  if (payload !== 'none' && payload !== 'text' && payload !== 'base64')
    throw new ApiError(ApiErrorCode.BadRequest, 'payload must be text or base64', {
      details: { payload },
    });
  const waitMs = queryInt(q.wait, 'wait', 0, MAX_WAIT_MS, 0);
  if (waitMs > 0 && filter.after === undefined)
    throw new ApiError(
      ApiErrorCode.BadRequest,
      'wait needs after=<seq>: the cursor of the last answer (its "cursor")',
    );
  return { ...filter, limit: queryInt(q.limit, 'limit', 0, MAX_LIST, 100), payload, waitMs };
}

/** Whether a letter passes the filters the subject cannot apply (the rule). */
export function passes(l: DeadLetter, f: DlqFilter): boolean {
  return (
    (f.reason === undefined || l.reason === f.reason) &&
    (f.rule === undefined || l.ruleId === f.rule)
  );
}
