import type { AbsenceState } from './cep/absence.js';
import { newKeyState } from './cep/host.js';
import { patternIdle } from './cep/pattern-operators.js';
import type { SequenceState } from './cep/sequence.js';
import { threshold, type SlidingState, type TumblingState } from './cep/threshold.js';
import { isSmallWindow, type WindowArena } from './cep/small-window.js';
import type { CompiledRule } from './compile-rule.js';

/**
 * The event time after which a (key, lineage) state can change no outcome, as `rule` judges: a
 * sliding window's newest entry plus the look-back (any later event evicts every entry), and an
 * alert suppression time plus `suppressFor` less 1 ms (a later alert is not suppressed); the
 * later of the two. Infinity for states that end by their own timers (tumbling windows,
 * sequences, absence triggers: each removes itself when its timer leaves it idle).
 *
 * With a `stateTtl` (and `withTtl`), no later than the newest event time the state holds (an
 * entry, a matched step, a trigger, the last alert) plus the TTL: the rule's own bound on how long
 * a key it has not heard of is remembered, whatever its window or timers would keep.
 */
export function stateEnd(
  rule: CompiledRule,
  sup: number | undefined,
  op: unknown,
  windows: WindowArena,
  withTtl = true,
): number {
  const end = naturalEnd(rule, sup, op, windows);
  const ttl = rule.stateTtlMs;
  if (!withTtl || ttl <= 0 || end === -Infinity) return end;
  const newest = Math.max(sup ?? -Infinity, op === undefined ? -Infinity : opNewest(op, windows));
  return newest === -Infinity ? end : Math.min(end, newest + ttl);
}

function naturalEnd(
  rule: CompiledRule,
  sup: number | undefined,
  op: unknown,
  windows: WindowArena,
): number {
  let end = -Infinity;
  if (op !== undefined) {
    const p = rule.pattern;
    if (p?.kind !== 'threshold') {
      if (!opIdle(rule, op)) return Infinity;
    } else if (isSmallWindow(op)) end = windows.newest(op) + p.windowMs;
    else if ((op as { k: string }).k === 's') {
      const s = op as SlidingState;
      if (s.h < s.t.length) end = (s.t[s.t.length - 1] as number) + p.windowMs;
    } else if (!threshold.idle(newKeyState(undefined, op))) return Infinity;
  }
  if (sup !== undefined) {
    // Without suppressFor (a compatible change took it away) the time suppresses nothing: it
    // ends at once, and its key is looked at, where another rule version may still need it.
    const s = rule.suppressForMs > 0 ? sup + rule.suppressForMs - 1 : sup;
    if (s > end) end = s;
  }
  return end;
}

/** Whether an operator state holds nothing worth keeping, as `rule`'s pattern reads it. */
export function opIdle(rule: CompiledRule, op: unknown): boolean {
  return patternIdle(rule, newKeyState(undefined, op));
}

/** The newest event time an operator state holds; -Infinity when it holds none. */
function opNewest(op: unknown, windows: WindowArena): number {
  if (isSmallWindow(op)) return windows.newest(op);
  switch ((op as { k?: string }).k) {
    case 's': {
      const s = op as SlidingState;
      return s.h < s.t.length ? (s.t[s.t.length - 1] as number) : -Infinity;
    }
    case 't':
      return (op as TumblingState).last.ts;
    case 'q': {
      // A partial match's events are listed newest first.
      let newest = -Infinity;
      for (const pm of (op as SequenceState).pm) {
        const ts = pm.refs?.ref.ts ?? pm.start;
        if (ts > newest) newest = ts;
      }
      return newest;
    }
    case 'a': {
      // Triggers arrive in event-time order, so the last one is the newest.
      const p = (op as AbsenceState).p;
      return p.length === 0 ? -Infinity : (p[p.length - 1] as AbsenceState['p'][number]).ref.ts;
    }
    default:
      return -Infinity;
  }
}
