/**
 * The records of a downstream partition of a re-keying hop (see `downstream.ts`): forwarded
 * events, judged under the rule set they carry, and source reports, which move the watermark and
 * ready the changes the sources applied.
 */
import { InvalidReason } from './event.js';
import { buffersHits, Downstream } from './downstream.js';
import { bufferedHits } from './verdict.js';
import { add, parseInTime } from './partition-state.js';
import type { PartitionRecord, PartitionState, ProcessResult } from './partition-state.js';
import type { Host } from './partition-host.js';
import { release } from './release.js';
import { bufferEvent } from './lineage-use.js';

/** A record a source of the hop sends a downstream partition. */
type HopRecord = Extract<PartitionRecord, { kind: 'forward' | 'report' }>;

/**
 * The partition's sources, when a message from one is taken: one naming no source is refused,
 * and one that is not its source's turn (see `source-hop.ts`) is skipped.
 */
function turnOf(st: PartitionState, rec: HopRecord, out: ProcessResult): Downstream | undefined {
  const d = st.down;
  if (d !== undefined && d.isSource(rec.src)) {
    const turn = d.take(rec.src, rec.origin, rec.n);
    if (turn === 'taken') return d;
    out.skipped = turn;
    return undefined;
  }
  add(out, 'invalid', {
    seq: rec.seq,
    reason: InvalidReason.badForward,
    message:
      d === undefined
        ? `partition ${st.partition} is not downstream of a re-keying hop: only Vigil's sources forward records, to downstream partitions`
        : `source partition ${rec.src} is not one of the ${d.sources} sources of key space "${d.space}"`,
  });
  return undefined;
}

/**
 * Takes one record of a source, in its turn: a forwarded event is judged, a report readies the
 * change its source applied (with its horizon there). Both carry the source's watermark.
 */
export function onHopRecord(st: PartitionState, rec: HopRecord, out: ProcessResult, h: Host): void {
  const d = turnOf(st, rec, out);
  if (d === undefined) return;
  if (rec.kind === 'forward') judgeForward(st, d, rec, out);
  else d.report(rec.src, rec.ruleSet, rec.horizon);
  advanceTo(st, d.hear(rec.src, rec.watermark), h);
}

/**
 * Judges a forwarded event under the rule set it was judged under at its source, by the rules of
 * this partition's key space. Every hit waits for the watermark, pattern or not: alerts and
 * suppression then follow event time, not the order in which the sources' records arrived.
 * Missing keys and rule errors were counted at the source and are not counted again.
 */
function judgeForward(
  st: PartitionState,
  d: Downstream,
  rec: Extract<HopRecord, { kind: 'forward' }>,
  out: ProcessResult,
): void {
  // The source judged it in time; only a forged record (or a source's bad watermark) is late here.
  const parsed = parseInTime(st, rec.seq, rec.data, rec.publishTs, out);
  if (parsed === undefined) return;
  const rs = rec.ruleSet;
  const hits = bufferedHits(rs, parsed.event, rec.key, parsed.hostile, (rule) =>
    buffersHits(rule, d.space, undefined),
  );
  if (hits.length > 0) bufferEvent(st, parsed, rec.srcSeq, rec.seq, rec.key, rs, hits);
}

/** Downstream: the watermark is the minimum of the sources'. */
function advanceTo(st: PartitionState, watermark: number, h: Host): void {
  if (watermark > st.watermark) st.watermark = watermark;
  release(st, h);
}

/**
 * The latest event time a source partition has seen (judged events and ticks): every event it
 * judged so far is at or before it. Reported at epoch markers (see `downstream.ts`).
 */
export function sourceHorizon(st: PartitionState): number {
  return Math.max(st.maxTs, st.maxEventTs);
}
