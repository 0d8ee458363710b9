/**
 * The rules core's one entry point, {@link processRecord}, and the records of a partition of the
 * event log: events judged under the rule set in force at their position, ticks, epoch markers.
 */
import { newKeyState } from './cep/host.js';
import type { CompiledRule } from './compile-rule.js';
import { RuleEvaluationError } from './errors.js';
import { InvalidReason } from './event.js';
import type { SourceHop } from './source-hop.js';
import type { EventRef } from './types.js';
import { Hits, keyOf, LazyContext, ruleVerdict, TRIGGER } from './verdict.js';
import { add, newResult, parseInTime } from './partition-state.js';
import type { PartitionRecord, PartitionState, ProcessResult } from './partition-state.js';
import { loadState, saveState } from './keyed-access.js';
import { hostFor, type Host } from './partition-host.js';
import { onHopRecord, sourceHorizon } from './downstream-records.js';
import { release, applyRuleSet } from './release.js';
import { bufferEvent } from './lineage-use.js';

/** Judges an event under the rule set in force at its log position; stateful rules see it later, in event-time order. */
function onEvent(
  st: PartitionState,
  rec: Extract<PartitionRecord, { kind: 'event' }>,
  out: ProcessResult,
  h: Host,
): void {
  const parsed = parseInTime(st, rec.seq, rec.data, rec.publishTs, out);
  if (parsed === undefined) return;
  const { event, type, ts, id, hostile } = parsed;
  const rs = st.ruleSet;
  // Made when a rule without a pattern fires (rare); a buffered event gets its own when released.
  let ref: EventRef | undefined;
  const lc = new LazyContext(event, rs, hostile);
  let hits: Hits | undefined;
  // The key spaces the event goes to and its key in each, side by side (rarely more than one).
  let spaces: string[] | undefined;
  let spaceKeys: string[] | undefined;
  const rules = rs.rulesFor(type);
  // A hostile event is judged exhaustively, where a rule skipped on its guard could have thrown.
  const skipped = hostile ? undefined : rs.guardsFor(type).skipped(event);
  for (let i = 0; i < rules.length; i++) {
    if (skipped !== undefined && skipped[i] === 1) continue;
    const rule = rules[i] as CompiledRule;
    const key = keyOf(rule, event, rec.key);
    if (key === undefined) {
      // A rule whose key field the event lacks does not meet it: said, not silent.
      add(out, 'keyMissing', rule.id);
      continue;
    }
    let v: number;
    try {
      v = ruleVerdict(rule, type, lc);
    } catch (err) {
      add(out, 'errors', {
        seq: rec.seq,
        ruleId: rule.id,
        error: new RuleEvaluationError(rule.id, err),
        event,
      });
      continue;
    }
    const trigger = (v & TRIGGER) !== 0;
    if (trigger) add(out, 'matched', rule.id);
    if (st.hop !== undefined && st.hop.sendsOn(rule)) {
      const space = rule.keySpace as string;
      if (v !== 0 && (spaces === undefined || !spaces.includes(space))) {
        (spaces ??= []).push(space);
        (spaceKeys ??= []).push(key);
      }
      continue;
    }
    if (rule.pattern === undefined) {
      if (!trigger) continue;
      const suppressing = rule.suppressForMs > 0;
      const ks = suppressing ? loadState(st, rule, key) : newKeyState();
      h.alert(rule, ks, {
        key,
        ts,
        events: [
          (ref ??= Object.freeze(
            id === undefined ? { seq: rec.seq, ts } : { seq: rec.seq, id, ts },
          )),
        ],
        values: {},
        idParts: `e|${rec.seq}`,
        fields: event,
      });
      if (suppressing) saveState(st, rule, key, ks);
    } else if (v !== 0) {
      (hits ??= new Hits(rec.key)).add(rule, key, v);
    }
  }
  if (hits !== undefined) {
    hits.trim();
    bufferEvent(st, parsed, rec.seq, rec.seq, rec.key, rs, hits);
  }
  if (ts > st.maxEventTs) st.maxEventTs = ts;
  // Event time moves no further than the log's own clock: an event whose `ts` runs ahead of the
  // time it was stored (a producer's clock ahead, or a bad one inside the future limit) is judged
  // at its `ts`, but cannot push the watermark past events stored after it in time.
  advance(st, ts < rec.publishTs ? ts : rec.publishTs, h);
  if (spaces !== undefined) {
    const hop = st.hop as SourceHop;
    const text = parsed.text ?? JSON.stringify(event);
    for (let i = 0; i < spaces.length; i++) {
      const space = spaces[i] as string;
      const key = (spaceKeys as string[])[i] as string;
      const { partition, n } = hop.route(space, key);
      add(out, 'sent', {
        kind: 'forward',
        space,
        partition,
        origin: hop.origin,
        n,
        srcSeq: rec.seq,
        controlSeq: rs.controlSeq,
        watermark: st.watermark,
        key,
        ts,
        publishTs: rec.publishTs,
        text,
      });
    }
  }
}

function onTick(
  st: PartitionState,
  rec: Extract<PartitionRecord, { kind: 'tick' }>,
  out: ProcessResult,
  h: Host,
): void {
  const at = rec.storedAt;
  if (at !== undefined && rec.ts > at + st.limits.maxEventFutureMs) {
    add(out, 'invalid', {
      seq: rec.seq,
      reason: InvalidReason.badTick,
      message: `tick time ${rec.ts} is more than ${st.limits.maxEventFutureMs} ms after the time it was stored (${at}); ticks are written by Vigil only, with the time they are sent`,
    });
    return;
  }
  advance(st, at === undefined || rec.ts < at ? rec.ts : at, h);
}

function advance(st: PartitionState, ts: number, h: Host): void {
  if (ts > st.maxTs) {
    st.maxTs = ts;
    st.watermark = Math.max(st.watermark, ts - st.outOfOrderMs - 1);
  }
  release(st, h);
}

function onMarker(
  st: PartitionState,
  rec: Extract<PartitionRecord, { kind: 'marker' }>,
  out: ProcessResult,
): void {
  applyRuleSet(st, rec.ruleSet, out);
}

/**
 * A source's report to every downstream partition of every key space it sends to: at each epoch
 * marker (so the first report of a rule set carries the horizon at its marker) and as event time
 * passes (so a downstream hears from a source it gets no events from).
 */
function report(st: PartitionState, hop: SourceHop, out: ProcessResult): void {
  if (out.applied !== undefined) hop.addSpaces(st.ruleSet);
  if (st.watermark > -Infinity) hop.lastReport = st.watermark;
  const horizon = sourceHorizon(st);
  for (const [space, counts] of hop.sent)
    for (let p = 0; p < counts.length; p++)
      add(out, 'sent', {
        kind: 'report',
        space,
        partition: p,
        origin: hop.origin,
        n: hop.number(space, p),
        controlSeq: st.ruleSet.controlSeq,
        watermark: st.watermark,
        horizon,
      });
}

/**
 * The runtime's one entry point: processes one record of the partition's log and returns what it
 * produced. Deterministic: the same state and record always give the same result and the same
 * next state; no I/O, no clock. Records must come in log order (increasing `seq`).
 */
export function processRecord(st: PartitionState, rec: PartitionRecord): ProcessResult {
  const out = newResult();
  // A record at or before the offset was processed already (a redelivery after a restore): skip it.
  if (rec.seq <= st.offset) return out;
  const h = hostFor(st, out);
  if (st.down !== undefined && rec.kind !== 'forward' && rec.kind !== 'report') {
    add(out, 'invalid', {
      seq: rec.seq,
      reason: InvalidReason.badForward,
      message: `a downstream partition of key space "${st.down.space}" takes forwarded records and source reports only, not a ${rec.kind}`,
    });
    st.offset = rec.seq;
    return out;
  }
  switch (rec.kind) {
    case 'event':
      onEvent(st, rec, out, h);
      break;
    case 'marker':
      onMarker(st, rec, out);
      break;
    case 'tick':
      onTick(st, rec, out, h);
      break;
    case 'forward':
    case 'report':
      onHopRecord(st, rec, out, h);
      break;
  }
  const hop = st.hop;
  if (hop !== undefined && (out.applied !== undefined || hop.due(st.watermark)))
    report(st, hop, out);
  st.offset = rec.seq;
  return out;
}
