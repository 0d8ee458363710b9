/**
 * The re-keying hop, pure. A rule keyed by fields other than the partition key (a key space) needs
 * every event of its key in one place. The owner of a source partition judges each event's `on`
 * and `when` under the rule set in force there and forwards the events some rule of a key space
 * needs, once per key space, to the downstream partition of the key. A downstream partition
 * hears from every source partition and must give the same alerts whatever the interleaving of
 * their records, so everything it decides is a function of the source logs:
 *
 * - **Rules.** A forwarded event carries the rule set in force where it was judged at the source
 *   and is judged downstream under it (aligned activation across the hop).
 * - **Event time.** Each source's records carry its watermark (lateness is decided at the
 *   source); the downstream watermark is their minimum, so a slow source holds the downstream
 *   back rather than making its events late. Events are released in (time, source sequence)
 *   order: the source sequence is the event's position in `EVENTS`, unique over all partitions.
 * - **Changes.** At each epoch marker it applies, a source reports the control sequence and its
 *   horizon: the latest event time it has seen, so every event it judged under an earlier rule set
 *   is at or before it. Once every source has reported a change, it takes force downstream at the
 *   latest of their horizons, in event time: lineages that the new rule set drops end there (their
 *   timers due by then fire), and later timers run under the new versions. No source that has not
 *   reported can have its watermark past that point, so it is never in the downstream's past.
 * - **Duplicates and gaps.** A source numbers what it sends each downstream partition (see
 *   `source-hop.ts`); the downstream takes message n from a source only after n − 1, and drops
 *   the rest: what it took already (a restored source sends again what it sent after its
 *   checkpoint) and what comes early (a failed publish left a gap; the source sends again from it).
 */
import type { CompiledRule } from './compile-rule.js';
import { SnapshotError } from './errors.js';
import type { RuleSet } from './rule-set.js';

/** A change that every source has reported: it takes force at event time `end`. */
interface ReadyChange {
  readonly ruleSet: RuleSet;
  readonly end: number;
}

/** What a downstream partition knows of its sources and of the changes they reported. */
export class Downstream {
  /** Each source's watermark as last heard. */
  readonly watermarks: Float64Array;
  /** The number of the next message each source's turn is (see `source-hop.ts`)... */
  readonly next: Float64Array;
  /** ...in its numbering from this offset of its log. */
  readonly origins: Float64Array;
  /** Each source's latest reported control sequence. */
  readonly reported: Float64Array;
  /**
   * Each source's reports of changes not yet ready, in order: the rule set and the source's
   * horizon at its marker. A change is ready once every source has reported it or a later one.
   */
  readonly pending: { readonly ruleSet: RuleSet; readonly horizon: number }[][];
  /** Ready changes not yet in force, in control order (their ends never decrease). */
  readonly ready: ReadyChange[] = [];
  /**
   * Rule sets newer than the one in force that released events were judged under: with the one
   * in force, the versions that run a lineage's timers and expiry. Only released events count,
   * so what is here at a point of event time does not depend on what has arrived.
   */
  readonly released = new Map<number, RuleSet>();

  constructor(
    /** The key space (see `keySpaceOf`). */
    readonly space: string,
    /** How many source partitions forward to it. */
    readonly sources: number,
  ) {
    if (!Number.isSafeInteger(sources) || sources < 1)
      throw new RangeError(`sources must be a positive integer, got ${sources}`);
    this.watermarks = new Float64Array(sources).fill(-Infinity);
    this.next = new Float64Array(sources).fill(1);
    this.origins = new Float64Array(sources);
    this.reported = new Float64Array(sources);
    this.pending = Array.from({ length: sources }, () => []);
  }

  /** Whether `src` names a source of this partition. */
  isSource(src: number): boolean {
    return Number.isInteger(src) && src >= 0 && src < this.sources;
  }

  /**
   * Takes message `n` of the numbering from `origin` from `src` if it is its turn; otherwise
   * says why not. A newer origin starts again at 1; what comes of an older one is stale.
   */
  take(src: number, origin: number, n: number): 'taken' | 'duplicate' | 'gap' {
    const turn = this.turn(src, origin, n);
    if (turn !== 'turn') return turn;
    this.origins[src] = origin;
    this.next[src] = n + 1;
    return 'taken';
  }

  /** Whether message `n` of the numbering from `origin` is `src`'s turn (what {@link take} would take). */
  turn(src: number, origin: number, n: number): 'turn' | 'duplicate' | 'gap' {
    const current = this.origins[src] as number;
    if (origin !== current) {
      if (origin < current) return 'duplicate';
      return n === 1 ? 'turn' : 'gap';
    }
    const next = this.next[src] as number;
    if (n !== next) return n < next ? 'duplicate' : 'gap';
    return 'turn';
  }

  /** Raises a source's watermark; the new minimum over the sources. */
  hear(src: number, watermark: number): number {
    const w = this.watermarks;
    if (watermark > (w[src] as number)) w[src] = watermark;
    let min = Infinity;
    for (let i = 0; i < w.length; i++) if ((w[i] as number) < min) min = w[i] as number;
    return min;
  }

  /**
   * Takes a source's report of the change to `ruleSet` at its marker, with its horizon there,
   * and readies the changes every source has now reported. A report of a change the source
   * reported already (a replay) changes nothing.
   */
  report(src: number, ruleSet: RuleSet, horizon: number): void {
    const c = ruleSet.controlSeq;
    if (c <= (this.reported[src] as number)) return;
    this.reported[src] = c;
    (this.pending[src] as { ruleSet: RuleSet; horizon: number }[]).push({ ruleSet, horizon });
    let upTo = Infinity;
    for (let i = 0; i < this.sources; i++) upTo = Math.min(upTo, this.reported[i] as number);
    const last = this.ready.at(-1)?.ruleSet.controlSeq ?? 0;
    // The changes reported by any source, after the last ready one and up to what all reported.
    const seqs = new Map<number, RuleSet>();
    for (const list of this.pending)
      for (const r of list) {
        const rc = r.ruleSet.controlSeq;
        if (rc > last && rc <= upTo) seqs.set(rc, r.ruleSet);
      }
    for (const cs of [...seqs.keys()].sort((a, b) => a - b)) {
      // A source that skipped `cs` (a later marker first) judged nothing under it: its first
      // report at or after `cs` bounds the events it judged under the rule sets before.
      let end = -Infinity;
      for (const list of this.pending) {
        const first = list.find((r) => r.ruleSet.controlSeq >= cs);
        if (first !== undefined && first.horizon > end) end = first.horizon;
      }
      const prev = this.ready.at(-1)?.end ?? -Infinity;
      this.ready.push({ ruleSet: seqs.get(cs) as RuleSet, end: Math.max(end, prev) });
    }
    // Reports at or before `upTo` bound no change still to come.
    for (const list of this.pending) {
      let n = 0;
      while (n < list.length && (list[n] as { ruleSet: RuleSet }).ruleSet.controlSeq <= upTo) n++;
      list.splice(0, n);
    }
  }

  /** Records that an event judged under `ruleSet` was released while `inForce` is in force. */
  noteReleased(ruleSet: RuleSet, inForce: RuleSet): void {
    if (ruleSet.controlSeq > inForce.controlSeq) this.released.set(ruleSet.controlSeq, ruleSet);
  }

  /** Forgets the released rule sets at or before the one now in force. */
  forgetUpTo(controlSeq: number): void {
    for (const c of this.released.keys()) if (c <= controlSeq) this.released.delete(c);
  }

  /** The rule sets it holds besides the one in force (a checkpoint's store must hold them). */
  ruleSets(): RuleSet[] {
    return [
      ...this.pending.flatMap((list) => list.map((r) => r.ruleSet)),
      ...this.ready.map((c) => c.ruleSet),
      ...this.released.values(),
    ];
  }

  /** For a checkpoint's meta. */
  toJSON(): DownstreamJSON {
    return {
      space: this.space,
      sources: this.sources,
      watermarks: [...this.watermarks].map(finite),
      next: [...this.next],
      origins: [...this.origins],
      reported: [...this.reported],
      pending: this.pending.map((list) =>
        list.map((r) => [r.ruleSet.controlSeq, finite(r.horizon)]),
      ),
      ready: this.ready.map((c) => [c.ruleSet.controlSeq, finite(c.end)]),
      released: [...this.released.keys()].sort((a, b) => a - b),
    };
  }

  /**
   * Restores what {@link toJSON} wrote; `at` gives the rule set of a control sequence.
   * @throws SnapshotError when the JSON does not describe one.
   */
  static fromJSON(json: DownstreamJSON, at: (controlSeq: number) => RuleSet): Downstream {
    const n = json?.sources;
    const lists = [
      json?.watermarks,
      json?.next,
      json?.origins ?? json?.next,
      json?.reported,
      json?.pending,
    ];
    if (
      typeof json?.space !== 'string' ||
      !Number.isSafeInteger(n) ||
      n < 1 ||
      lists.some((l) => !Array.isArray(l) || l.length !== n) ||
      !Array.isArray(json.ready) ||
      !Array.isArray(json.released)
    )
      throw new SnapshotError(
        'the checkpoint of a downstream partition has no valid "down" section (space, sources and a list per source)',
      );
    const d = new Downstream(json.space, n);
    json.watermarks.forEach((w, i) => (d.watermarks[i] = w ?? -Infinity));
    json.next.forEach((n, i) => (d.next[i] = n));
    json.origins?.forEach((o, i) => (d.origins[i] = o));
    json.reported.forEach((c, i) => (d.reported[i] = c));
    json.pending.forEach((list, i) => {
      for (const [c, h] of list) d.pending[i]?.push({ ruleSet: at(c), horizon: h ?? -Infinity });
    });
    for (const [c, end] of json.ready) d.ready.push({ ruleSet: at(c), end: end ?? -Infinity });
    for (const c of json.released) d.released.set(c, at(c));
    return d;
  }
}

/** A downstream partition's sources and changes in a checkpoint's meta; -Infinity is `null`. */
export interface DownstreamJSON {
  readonly space: string;
  readonly sources: number;
  readonly watermarks: readonly (number | null)[];
  readonly next: readonly number[];
  /** Absent in checkpoints written before numberings had origins: all 0. */
  readonly origins?: readonly number[];
  readonly reported: readonly number[];
  /** Per source: `[controlSeq, horizon]` of each report not yet ready. */
  readonly pending: readonly (readonly (readonly [number, number | null])[])[];
  /** `[controlSeq, end]` of each ready change. */
  readonly ready: readonly (readonly [number, number | null])[];
  readonly released: readonly number[];
}

const finite = (x: number): number | null => (Number.isFinite(x) ? x : null);

/**
 * Whether a rule's events are re-keyed to its key space by a source whose partition key is the
 * key space `localSpace`. A rule keyed by the partition key (or by none) stays at the source, as
 * does one that keeps no state (no pattern, no `suppressFor`): it alerts on each event alone.
 */
export function rekeyed(rule: CompiledRule, localSpace: string | undefined): boolean {
  return (
    rule.keySpace !== undefined &&
    rule.keySpace !== localSpace &&
    (rule.pattern !== undefined || rule.suppressForMs > 0)
  );
}

/**
 * Whether a partition keeps a rule's hits in its reorder buffer: downstream of key space `space`,
 * the rules re-keyed to it (with or without a pattern); in the event log (`space` undefined), the
 * rules with a pattern that it does not send on (`sends`, given when it re-keys).
 */
export function buffersHits(
  rule: CompiledRule,
  space: string | undefined,
  sends: ((rule: CompiledRule) => boolean) | undefined,
): boolean {
  if (space !== undefined) return rule.keySpace === space && rekeyed(rule, undefined);
  return rule.pattern !== undefined && !(sends?.(rule) ?? false);
}
