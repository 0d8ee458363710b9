/** The expiry of keyed state that can change nothing any more (see `expiry.ts` for the buckets). */
import type { KeyStates } from './keyed-states.js';
import { expiryBucket, ExpiryReason } from './expiry.js';
import { stateEnd } from './state-end.js';
import type { PartitionState } from './partition-state.js';
import { keyOfState, deleteSlot } from './keyed-access.js';
import { lineageRules } from './lineage-use.js';

/**
 * The end (see {@link stateEnd}) of a key's state in lineage `sid` under every rule version that
 * may still write to it (a buffered event may be judged under an older one): the state ends when
 * the last of them is done with it. Undefined when no rule writes to the lineage.
 */
export function lineageEnd(
  st: PartitionState,
  sid: string,
  sup: number | undefined,
  op: unknown,
  withTtl = true,
): number | undefined {
  const at = sid.lastIndexOf('@');
  const rules = lineageRules(st, sid.slice(0, at), Number(sid.slice(at + 1)));
  if (rules.length === 0) return undefined;
  let end = -Infinity;
  for (const rule of rules) end = Math.max(end, stateEnd(rule, sup, op, st.windows, withTtl));
  return end;
}

/**
 * The expiry bucket of a key as its states stand (the earliest end among them, rounded up), or
 * undefined when none ends by itself. A key is listed at or before it (unless a compatible change
 * lowered `suppressFor` since: then its states go at the later listing).
 */
export function keyExpiry(st: PartitionState, states: KeyStates): number | undefined {
  let first = Infinity;
  states.forEach((sid, sup, op) => {
    const end = lineageEnd(st, sid, sup, op);
    if (end !== undefined && end > -Infinity && end < first) first = end;
  });
  return first === Infinity ? undefined : expiryBucket(first);
}

/** Looks at the keys listed in expiry buckets up to `upTo`, removing the states that can change nothing any more. */
export function expireKeys(st: PartitionState, upTo: number): void {
  for (let b = st.expiry.peek(); b !== undefined && b <= upTo; b = st.expiry.peek()) {
    for (const key of st.expiry.take()) expireKey(st, key, b);
    if (b === st.legacyExpiry) st.legacyExpiry = undefined;
  }
}

/**
 * Removes a key's states whose end (see {@link stateEnd}) is at or before `bucket`, and lists the
 * key again for the earliest end of those left. Every rule version that may still write to a
 * lineage counts (a buffered event may be judged under an older one): the state ends when the
 * last of them is done with it.
 */
export function expireKey(st: PartitionState, key: string, bucket: number): void {
  const k = keyOfState(st, key);
  // Gone, or listed again in another bucket since (this entry is stale).
  if (k < 0 || st.states.exp(k) !== bucket) return;
  const states = st.states;
  states.setExp(k, undefined);
  let next = Infinity;
  const done: number[] = [];
  for (let s = states.first(k), e = s + states.stateCount(k); s < e; s++) {
    const sid = states.sid(s);
    const sup = states.sup(s);
    const op = states.op(s);
    const end = lineageEnd(st, sid, sup, op);
    if (end === undefined) continue;
    if (end <= bucket) {
      const opEnd = lineageEnd(st, sid, undefined, op) ?? -Infinity;
      done.push(s);
      st.expired[
        (lineageEnd(st, sid, sup, op, false) ?? end) > bucket
          ? ExpiryReason.ttl
          : opEnd >= end
            ? ExpiryReason.window
            : ExpiryReason.suppression
      ]++;
    } else if (end < next) next = end;
  }
  st.dirty.add(key);
  // Last first: removing a state moves the ones after it.
  for (let i = done.length - 1; i >= 0; i--) deleteSlot(st, k, done[i] as number);
  if (next !== Infinity && states.keyNumber(key) === k) {
    const b = expiryBucket(next);
    states.setExp(k, b);
    st.expiry.add(key, b);
  }
}
