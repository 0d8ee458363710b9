import type { CompiledRule, CompiledThreshold } from '../compile-rule.js';
import type { EventRef } from '../types.js';
import { titleFields } from './host.js';
import type { KeyState, OperatorEvent, OperatorHost, PatternOperator } from './host.js';
import {
  entriesBefore,
  isSmallWindow,
  NO_ENTRIES,
  smallWindowMax,
  type SmallWindow,
  type WindowArena,
} from './small-window.js';

export { NO_ENTRIES } from './small-window.js';

/**
 * Sliding look-back window `[t − window, t]`, evaluated at every event. Entries are kept in
 * arrival (= event-time) order with a moving head, and every aggregate is maintained
 * incrementally, at amortised O(1) per event whatever the number of events in the window:
 * - sum/avg with two stacks: entries `[h, f)` carry suffix sums `fs` computed when the front was
 *   last rebuilt, entries `[f, end)` a running sum `bs`. Nothing is ever subtracted, so a large
 *   value that has left the window leaves no rounding error behind.
 * - min/max with monotonic deques of entry positions; distinct with a value→count map.
 */
export interface SlidingState {
  k: 's';
  /** Head: position of the oldest entry still in the window. */
  h: number;
  t: number[];
  /** Values (numbers for sum/avg/min/max, primitives for distinct); empty for count. */
  v: unknown[];
  /** Whether sums are kept (sum/avg). */
  sums: boolean;
  /** sum/avg: end of the front stack, its suffix sums (`fs[i - fs0]` for entry i), the back stack's sum. */
  f: number;
  fs: number[];
  fs0: number;
  bs: number;
  /** Monotonic deques of positions (min: increasing values; max: decreasing). */
  mn: number[];
  mx: number[];
  /** distinct: value → occurrences in the window, keyed by type-tagged value. */
  d: Map<string, number> | undefined;
}

/** Tumbling window `[start, start + window)`, closed when the watermark passes its end. */
export interface TumblingState {
  k: 't';
  st: number;
  n: number;
  sum: number;
  min: number;
  max: number;
  d: Map<string, number> | undefined;
  last: EventRef;
  f: Record<string, unknown>;
}

function distinctKey(v: unknown): string | undefined {
  switch (typeof v) {
    case 'string':
      return `s${v}`;
    case 'number':
      return Number.isFinite(v) ? `n${v}` : undefined;
    case 'boolean':
      return `b${v}`;
    default:
      return undefined;
  }
}

/** Why an event's aggregated field cannot be used. */
class UnusableValue {
  constructor(readonly message: string) {}
}

/**
 * Reads the aggregated field (undefined for count); an {@link UnusableValue} when it cannot be
 * used. Called once per (event, threshold rule): no result object unless the value is unusable.
 */
function readValue(p: CompiledThreshold, event: Readonly<Record<string, unknown>>): unknown {
  if (p.aggregate === 'count') return undefined;
  const field = p.field as string;
  const v = Object.hasOwn(event, field) ? event[field] : undefined;
  if (p.aggregate === 'distinct') {
    return distinctKey(v) === undefined
      ? new UnusableValue(
          `field "${field}" must be a string, finite number or boolean to count distinct values, got ${JSON.stringify(v) ?? 'nothing'}`,
        )
      : v;
  }
  return typeof v === 'number' && Number.isFinite(v)
    ? v
    : new UnusableValue(
        `field "${field}" must be a finite number for aggregate "${p.aggregate}", got ${JSON.stringify(v) ?? 'nothing'}`,
      );
}

/**
 * Appends `x`, starting an empty array afresh as `[x]`. Most windows of a partition hold a single
 * entry (most keys are seen rarely), and V8 gives an empty array room for 17 elements on its
 * first push: a one-element literal takes 56 bytes where that takes 184. Larger windows then grow
 * as usual. An empty array has no positions pointing into it (head, front and deques are all 0),
 * so replacing it changes nothing else.
 */
function append<T>(a: T[], x: T): T[] {
  if (a.length === 0) return [x];
  a.push(x);
  return a;
}

/**
 * A mutable window holding the entries `t`/`v` (oldest first), its front end at `f`, with the
 * sums of its two stacks as the window would have them after the same pushes and evictions: the
 * front's suffix sums from `f` down, the back's sum in arrival order. Empty parts share
 * {@link NO_ENTRIES}.
 */
export function slidingWindow(
  t: number[],
  v: unknown[],
  sums: boolean,
  f: number,
  mn: number[] = NO_ENTRIES,
  mx: number[] = NO_ENTRIES,
  d: Map<string, number> | undefined = undefined,
): SlidingState {
  const s: SlidingState = {
    k: 's',
    h: 0,
    t: t.length === 0 ? NO_ENTRIES : t,
    v: v.length === 0 ? NO_ENTRIES : v,
    sums,
    f,
    fs: NO_ENTRIES,
    fs0: 0,
    bs: 0,
    mn: mn.length === 0 ? NO_ENTRIES : mn,
    mx: mx.length === 0 ? NO_ENTRIES : mx,
    d,
  };
  if (sums && t.length > 0) {
    rebuildFront(s, f);
    for (let i = f; i < v.length; i++) s.bs += v[i] as number;
  }
  return s;
}

function sliding(ks: KeyState, p: CompiledThreshold, arena: WindowArena): SlidingState {
  const op = ks.op as SlidingState | SmallWindow | undefined;
  // A small window that grows past its bound becomes the mutable window with the same entries.
  if (isSmallWindow(op)) {
    ks.op = slidingWindow(arena.times(op), arena.values(op), arena.sums(op), arena.front(op));
    arena.free(op);
  } else if (op?.k !== 's')
    ks.op = slidingWindow(
      NO_ENTRIES,
      NO_ENTRIES,
      p.aggregate === 'sum' || p.aggregate === 'avg',
      0,
    );
  return ks.op as SlidingState;
}

/** Makes entries `[h, end)` the front stack, computing their suffix sums from the end; the back stack starts empty. */
function rebuildFront(s: SlidingState, end: number = s.t.length): void {
  s.fs = new Array<number>(end - s.h);
  let acc = 0;
  for (let i = end - 1; i >= s.h; i--) {
    acc += s.v[i] as number;
    s.fs[i - s.h] = acc;
  }
  s.fs0 = s.h;
  s.f = end;
  s.bs = 0;
}

function windowSum(s: SlidingState): number {
  return (s.h < s.f ? (s.fs[s.h - s.fs0] as number) : 0) + s.bs;
}

function evictHead(s: SlidingState, p: CompiledThreshold): void {
  // The back stack is never evicted from: when the front is empty, the back becomes the front.
  if (s.sums && s.h >= s.f) rebuildFront(s);
  const i = s.h;
  if (p.aggregate === 'min' && s.mn[0] === i) s.mn.shift();
  else if (p.aggregate === 'max' && s.mx[0] === i) s.mx.shift();
  else if (p.aggregate === 'distinct' && s.d) {
    const key = distinctKey(s.v[i]) as string;
    const c = (s.d.get(key) ?? 1) - 1;
    if (c === 0) s.d.delete(key);
    else s.d.set(key, c);
  }
  s.h++;
}

/** Drops evicted entries from the front of the arrays once they are the larger part. */
function compact(s: SlidingState): void {
  if (s.h < 64 || s.h * 2 < s.t.length) return;
  const h = s.h;
  s.t.splice(0, h);
  if (s.v.length > 0) s.v.splice(0, h);
  for (let i = 0; i < s.mn.length; i++) s.mn[i] = (s.mn[i] as number) - h;
  for (let i = 0; i < s.mx.length; i++) s.mx[i] = (s.mx[i] as number) - h;
  if (s.fs.length > 0) {
    s.fs.splice(0, h - s.fs0);
    s.fs0 = 0;
  }
  s.f = Math.max(0, s.f - h);
  s.h = 0;
}

function slidingAggregate(s: SlidingState, p: CompiledThreshold): number {
  const n = s.t.length - s.h;
  switch (p.aggregate) {
    case 'count':
      return n;
    case 'sum':
      return windowSum(s);
    case 'avg':
      return windowSum(s) / n;
    case 'min':
      return s.v[s.mn[0] as number] as number;
    case 'max':
      return s.v[s.mx[0] as number] as number;
    case 'distinct':
      return s.d?.size ?? 0;
  }
}

/** Whether the rule's sliding windows may be small windows (see `small-window.ts`). */
function smallAggregate(p: CompiledThreshold): boolean {
  return p.aggregate === 'count' || p.aggregate === 'sum' || p.aggregate === 'avg';
}

function onSmall(
  rule: CompiledRule,
  p: CompiledThreshold,
  ks: KeyState,
  prior: SmallWindow | undefined,
  e: OperatorEvent,
  value: unknown,
  host: OperatorHost,
): void {
  const ts = e.ref.ts;
  const from = ts - p.windowMs;
  const sums = p.aggregate !== 'count';
  const arena = host.windows;
  const byTime = entriesBefore(arena, prior, from);
  const held = (prior === undefined ? 0 : arena.size(prior)) + 1 - byTime;
  const overLimit = Math.max(0, held - host.limits.maxWindowEntriesPerKey);
  const w = arena.append(prior, sums, ts, sums ? (value as number) : 0, byTime + overLimit);
  ks.op = w;
  if (overLimit > 0) host.overflow(rule, e.key, overLimit, 'maxWindowEntriesPerKey');
  const n = arena.size(w);
  const agg = p.aggregate === 'count' ? n : p.aggregate === 'sum' ? arena.sum(w) : arena.sum(w) / n;
  if (p.compare(agg)) {
    host.alert(rule, ks, {
      key: e.key,
      ts,
      events: [e.ref],
      values: { [p.aggregate]: agg, count: n, windowStart: from, windowEnd: ts },
      idParts: `s|${e.ref.seq}`,
      fields: titleFields(rule, e.event),
    });
  }
}

/** Takes one event's value into the key's window (sliding or tumbling). */
type WindowStep = (
  rule: CompiledRule,
  p: CompiledThreshold,
  ks: KeyState,
  e: OperatorEvent,
  value: unknown,
  host: OperatorHost,
) => void;

const onSliding: WindowStep = (rule, p, ks, e, value, host) => {
  const op = ks.op as SlidingState | SmallWindow | undefined;
  if (
    (op === undefined || (isSmallWindow(op) && host.windows.size(op) < smallWindowMax())) &&
    smallAggregate(p) &&
    smallWindowMax() > 0
  ) {
    onSmall(rule, p, ks, op, e, value, host);
    return;
  }
  const s = sliding(ks, p, host.windows);
  const ts = e.ref.ts;
  const i = s.t.length;
  s.t = append(s.t, ts);
  switch (p.aggregate) {
    case 'count':
      break;
    case 'sum':
    case 'avg':
      s.v = append(s.v, value);
      s.bs += value as number;
      break;
    case 'min':
      s.v = append(s.v, value);
      while (
        s.mn.length > 0 &&
        (s.v[s.mn[s.mn.length - 1] as number] as number) >= (value as number)
      )
        s.mn.pop();
      s.mn = append(s.mn, i);
      break;
    case 'max':
      s.v = append(s.v, value);
      while (
        s.mx.length > 0 &&
        (s.v[s.mx[s.mx.length - 1] as number] as number) <= (value as number)
      )
        s.mx.pop();
      s.mx = append(s.mx, i);
      break;
    case 'distinct': {
      s.v = append(s.v, value);
      const key = distinctKey(value) as string;
      s.d ??= new Map();
      s.d.set(key, (s.d.get(key) ?? 0) + 1);
      break;
    }
  }
  const from = ts - p.windowMs;
  while (s.h < i && (s.t[s.h] as number) < from) evictHead(s, p);
  const max = host.limits.maxWindowEntriesPerKey;
  if (s.t.length - s.h > max) {
    const drop = s.t.length - s.h - max;
    for (let k = 0; k < drop; k++) evictHead(s, p);
    host.overflow(rule, e.key, drop, 'maxWindowEntriesPerKey');
  }
  if (s.sums && s.h === i) {
    // Only the new entry is left: the window is a new one's, whose sum adds later values in the
    // same order (a window that expiry removed would be new: expiry must change no sum's bits).
    s.f = i;
    s.fs = NO_ENTRIES;
    s.fs0 = i;
    s.bs = value as number;
  }
  compact(s);
  const agg = slidingAggregate(s, p);
  if (p.compare(agg)) {
    host.alert(rule, ks, {
      key: e.key,
      ts,
      events: [e.ref],
      values: { [p.aggregate]: agg, count: s.t.length - s.h, windowStart: from, windowEnd: ts },
      idParts: `s|${e.ref.seq}`,
      fields: titleFields(rule, e.event),
    });
  }
};

function tumblingAggregate(p: CompiledThreshold, s: TumblingState): number {
  switch (p.aggregate) {
    case 'count':
      return s.n;
    case 'sum':
      return s.sum;
    case 'avg':
      return s.sum / s.n;
    case 'min':
      return s.min;
    case 'max':
      return s.max;
    case 'distinct':
      return s.d?.size ?? 0;
  }
}

function closeTumbling(
  rule: CompiledRule,
  p: CompiledThreshold,
  ks: KeyState,
  key: string,
  s: TumblingState,
  host: OperatorHost,
  emit: boolean,
): void {
  ks.op = undefined;
  const agg = tumblingAggregate(p, s);
  if (!emit || !p.compare(agg)) return;
  const end = s.st + p.windowMs;
  host.alert(rule, ks, {
    key,
    ts: end - 1,
    events: [s.last],
    values: { [p.aggregate]: agg, count: s.n, windowStart: s.st, windowEnd: end },
    idParts: `t|${key}|${s.st}`,
    fields: s.f,
  });
}

const onTumbling: WindowStep = (rule, p, ks, e, value, host) => {
  const ts = e.ref.ts;
  const start = Math.floor(ts / p.windowMs) * p.windowMs;
  let s = ks.op as TumblingState | undefined;
  // The timer closes each window before any later event; this covers a window whose timer was lost.
  if (s?.k === 't' && s.st !== start) closeTumbling(rule, p, ks, e.key, s, host, true);
  s = ks.op as TumblingState | undefined;
  if (s?.k !== 't') {
    s = {
      k: 't',
      st: start,
      n: 0,
      sum: 0,
      min: Infinity,
      max: -Infinity,
      d: undefined,
      last: e.ref,
      f: {},
    };
    ks.op = s;
    host.schedule(start + p.windowMs - 1, rule, e.key);
  }
  s.n++;
  s.last = e.ref;
  s.f = titleFields(rule, e.event);
  if (p.aggregate === 'distinct') {
    s.d ??= new Map();
    const key = distinctKey(value) as string;
    s.d.set(key, (s.d.get(key) ?? 0) + 1);
  } else if (typeof value === 'number') {
    s.sum += value;
    if (value < s.min) s.min = value;
    if (value > s.max) s.max = value;
  }
};

/** Threshold: an aggregate over a sliding or tumbling window of the key's events. */
export const threshold: PatternOperator<CompiledThreshold> = {
  onEvent(rule, p, ks, e, host) {
    const value = readValue(p, e.event);
    if (value instanceof UnusableValue) {
      host.error(rule, e, value.message);
      return;
    }
    if (p.tumbling) onTumbling(rule, p, ks, e, value, host);
    else onSliding(rule, p, ks, e, value, host);
  },

  /** Closes the tumbling window that ends at `time + 1`. */
  onTimer(rule, p, ks, key, time, host, emit) {
    const s = ks.op as TumblingState | undefined;
    if (s?.k === 't' && s.st + p.windowMs - 1 === time)
      closeTumbling(rule, p, ks, key, s, host, emit);
  },

  idle(ks) {
    const s = ks.op as SlidingState | SmallWindow | TumblingState | undefined;
    // A small window always holds its newest entry.
    if (isSmallWindow(s)) return false;
    return s === undefined || (s.k === 's' && s.h >= s.t.length);
  },
};
