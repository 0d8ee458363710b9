import type { MsgHdrs } from '@nats-io/transport-node';
import {
  DeliverPolicy,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import { dlqSubject, storedAtMs, Streams } from '../protocol/index.js';
import {
  deadLetterOf,
  passes,
  PREVIEW_BYTES,
  type Bound,
  type DeadLetter,
  type DlqFilter,
  type DlqListQuery,
} from './dlq-letter.js';

/** Where `DLQ` is: its first and last sequence now. */
export interface DlqState {
  readonly firstSeq: number;
  readonly lastSeq: number;
  readonly messages: number;
}

/** A page of dead letters, oldest first. */
export interface DlqListing {
  readonly letters: DeadLetter[];
  /** Pass as `after` for what comes next: the last `DLQ` sequence this answer covers. */
  readonly cursor: number;
  /**
   * Read on from `after`/`since`: letters after `cursor` were left for the next page. The latest
   * letters (no `after`, no `since`): older ones may be there before the first.
   */
  readonly more: boolean;
  readonly state: DlqState;
}

/** Counts of dead letters per reason over a range of `DLQ`. */
export interface DlqStats {
  readonly fromSeq: number;
  readonly toSeq: number;
  readonly total: number;
  readonly reasons: Record<string, number>;
}

/** How a replay selects letters: by `DLQ` sequence, or by a filter (oldest first). */
export type ReplaySelection =
  | { readonly kind: 'seqs'; readonly seqs: readonly number[] }
  | { readonly kind: 'filter'; readonly filter: DlqFilter; readonly limit: number };

export interface DlqReaderOptions {
  /** Most `DLQ` messages one listing or selection looks at. Default 100,000. */
  readonly maxScan?: number;
  /** How often a waiting listing looks for new letters (ms). Default 200. */
  readonly pollMs?: number;
  /** A read that gets no message for this long gives up (ms): messages deleted under it. Default 10 s. */
  readonly idleMs?: number;
}

/** Headers with their first value. */
function headerRecord(h: MsgHdrs | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (h !== undefined) for (const [k, v] of h) if (v[0] !== undefined) out[k] = v[0];
  return out;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Reads the dead letters in `DLQ` (written by the service's `natsDeadLetterSink`): pages of them,
 * counts per reason, the letters a replay names, those of one message. Each read is an ordered
 * consumer over a range of sequences, filtered by reason through the subject
 * `vigil.dlq.<reason>`, and deleted when done.
 */
export class DlqReader {
  private readonly maxScan: number;
  private readonly pollMs: number;
  private readonly idleMs: number;

  constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    o: DlqReaderOptions = {},
  ) {
    this.maxScan = o.maxScan ?? 100_000;
    this.pollMs = o.pollMs ?? 200;
    this.idleMs = o.idleMs ?? 10_000;
  }

  async state(): Promise<DlqState> {
    const s = (await this.jsm.streams.info(Streams.dlq)).state;
    return { firstSeq: s.first_seq, lastSeq: s.last_seq, messages: s.messages };
  }

  /** The sequence of the first letter stored at or after `time`, if any. */
  async seqAt(time: number): Promise<number | undefined> {
    const c = await this.js.consumers.get(Streams.dlq, {
      deliver_policy: DeliverPolicy.StartTime,
      opt_start_time: new Date(time).toISOString(),
      headers_only: true,
    });
    try {
      if ((await c.info(true)).num_pending === 0) return undefined;
      return (await c.next({ expires: 5000 }))?.seq;
    } finally {
      await c.delete().catch(() => undefined);
    }
  }

  /** The sequences a filter's bounds stand for, within what `DLQ` holds now. */
  private async range(f: DlqFilter, st: DlqState): Promise<{ lo: number; hi: number }> {
    const at = async (b: Bound, end: boolean): Promise<number> => {
      if (b.kind === 'seq') return b.seq;
      // The last letter at or before a time ends just before the first one after it.
      const s = await this.seqAt(end ? b.time + 1 : b.time);
      return s === undefined ? st.lastSeq + 1 - (end ? 1 : 0) : s - (end ? 1 : 0);
    };
    let lo = Math.max(st.firstSeq, 1);
    if (f.since !== undefined) lo = Math.max(lo, await at(f.since, false));
    if (f.after !== undefined) lo = Math.max(lo, f.after + 1);
    let hi = st.lastSeq;
    if (f.until !== undefined) hi = Math.min(hi, await at(f.until, true));
    return { lo, hi };
  }

  /**
   * Reads `[lo, hi]` in order (one reason's subject, or all), handing each letter to `visit`
   * until it returns false. `keep`: bytes of each payload kept (a listing needs only a preview's).
   */
  private async scan(
    lo: number,
    hi: number,
    reason: string | undefined,
    keep: number,
    visit: (l: DeadLetter) => boolean,
  ): Promise<void> {
    if (lo > hi) return;
    const c = await this.js.consumers.get(Streams.dlq, {
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: lo,
      ...(reason === undefined ? {} : { filter_subjects: dlqSubject(reason) }),
    });
    try {
      // Nothing from `lo` on: a consumer would wait for letters yet to come.
      if ((await c.info(true)).num_pending === 0) return;
      const messages = await c.consume({ max_messages: Math.min(256, hi - lo + 1) });
      let idle: NodeJS.Timeout | undefined;
      const watch = () => {
        clearTimeout(idle);
        idle = setTimeout(() => void messages.close(), this.idleMs);
      };
      watch();
      try {
        for await (const m of messages) {
          if (m.seq > hi) break;
          watch();
          if (!visit(this.letter(m, keep)) || m.seq >= hi || m.info.pending === 0) break;
        }
      } finally {
        clearTimeout(idle);
        await messages.close();
      }
    } finally {
      await c.delete().catch(() => undefined);
    }
  }

  private letter(m: JsMsg, keep: number): DeadLetter {
    const data = m.data.byteLength > keep ? m.data.slice(0, keep) : m.data;
    return deadLetterOf({
      seq: m.seq,
      subject: m.subject,
      storedAt: storedAtMs(m.info),
      headers: headerRecord(m.headers),
      data,
      size: m.data.byteLength,
    });
  }

  /**
   * A page of dead letters. With `after` or `since`: the first `limit` from there on; else the
   * latest `limit`. With `after` and `waitMs`, waits that long for a letter when there is none
   * yet (a long poll), unless `signal` ends it first.
   */
  async list(q: DlqListQuery, signal?: AbortSignal): Promise<DlqListing> {
    const deadline = Date.now() + q.waitMs;
    let query = q;
    let before = -1;
    const aborted = (): boolean => signal?.aborted === true;
    for (;;) {
      const page = await this.page(query);
      if (page.letters.length > 0 || q.waitMs === 0 || q.limit === 0) return page;
      // A cursor that did not move (letters past it, but none this query can take, e.g. past
      // `until`) would be read again at once, forever: the wait ends there, as at the deadline.
      if (page.cursor === before || Date.now() >= deadline || aborted()) return page;
      before = page.cursor;
      // Wait until something is stored past the cursor, then read again from there.
      let last = page.state.lastSeq;
      while (last <= page.cursor && Date.now() < deadline && !aborted()) {
        await sleep(Math.min(this.pollMs, Math.max(0, deadline - Date.now())));
        last = (await this.state()).lastSeq;
      }
      if (last <= page.cursor || aborted()) return page;
      query = { ...q, after: page.cursor };
    }
  }

  private async page(q: DlqListQuery): Promise<DlqListing> {
    const state = await this.state();
    const { lo, hi } = await this.range(q, state);
    const keep = q.payload === 'none' ? PREVIEW_BYTES : Infinity;
    if (q.after === undefined && q.since === undefined) {
      const { letters, more } = await this.latest(lo, hi, q, q.limit, keep);
      return { letters, cursor: Math.max(hi, 0), more, state };
    }
    const letters: DeadLetter[] = [];
    // With limit 0 the answer is only the cursor: the end of what the query covers.
    let cursor = q.limit === 0 ? Math.max(hi, 0) : Math.max(Math.min(lo - 1, hi), 0);
    let more = false;
    let scanned = 0;
    if (q.limit > 0) {
      cursor = Math.max(hi, 0);
      await this.scan(lo, hi, q.reason, keep, (l) => {
        scanned++;
        if (passes(l, q)) letters.push(l);
        if (letters.length < q.limit && scanned < this.maxScan) return true;
        cursor = l.seq;
        more = l.seq < hi;
        return false;
      });
    }
    return { letters, cursor, more, state };
  }

  /** The last `limit` letters of `[lo, hi]` that pass the filter: read backwards in growing chunks. */
  private async latest(
    lo: number,
    hi: number,
    f: DlqFilter,
    limit: number,
    keep: number,
  ): Promise<{ letters: DeadLetter[]; more: boolean }> {
    let letters: DeadLetter[] = [];
    let end = hi;
    let size = Math.max(64, limit * 2);
    let budget = this.maxScan;
    let more = false;
    while (end >= lo && letters.length < limit && budget > 0) {
      const start = Math.max(lo, end - Math.min(size, budget) + 1);
      const need = limit - letters.length;
      let chunk: DeadLetter[] = [];
      await this.scan(start, end, f.reason, keep, (l) => {
        if (!passes(l, f)) return true;
        chunk.push(l);
        if (chunk.length > 2 * need) {
          chunk = chunk.slice(-need);
          more = true;
        }
        return true;
      });
      if (chunk.length > need) more = true;
      letters = [...chunk.slice(-need), ...letters];
      budget -= end - start + 1;
      end = start - 1;
      size *= 4;
    }
    return { letters, more: more || (limit > 0 && end >= lo) };
  }

  /**
   * Dead letters per reason over `[since, now]`. Without `since` the stream's per-subject counts
   * answer at once; otherwise the shorter side is read (headers only): the range itself, or
   * what lies before it, taken from the totals.
   */
  async stats(since: Bound | undefined): Promise<DlqStats> {
    const info = await this.jsm.streams.info(Streams.dlq, { subjects_filter: 'vigil.dlq.>' });
    const st: DlqState = {
      firstSeq: info.state.first_seq,
      lastSeq: info.state.last_seq,
      messages: info.state.messages,
    };
    const { lo, hi } = await this.range(since === undefined ? {} : { since }, st);
    const totals: Record<string, number> = {};
    for (const [subject, n] of Object.entries(info.state.subjects ?? {}))
      totals[subject.slice('vigil.dlq.'.length)] = n;
    const counted = (from: number, to: number): Promise<Record<string, number>> =>
      this.countReasons(from, to);
    let reasons: Record<string, number>;
    if (lo > hi) reasons = {};
    else if (lo <= st.firstSeq) reasons = totals;
    else if (lo - st.firstSeq < hi - lo + 1) {
      const before = await counted(st.firstSeq, lo - 1);
      reasons = {};
      for (const [r, n] of Object.entries(totals)) {
        const left = n - (before[r] ?? 0);
        if (left > 0) reasons[r] = left;
      }
    } else reasons = await counted(lo, hi);
    const sorted = Object.fromEntries(
      Object.entries(reasons).sort(([a], [b]) => a.localeCompare(b)),
    );
    return {
      fromSeq: lo,
      toSeq: hi,
      total: Object.values(sorted).reduce((a, b) => a + b, 0),
      reasons: sorted,
    };
  }

  private async countReasons(lo: number, hi: number): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    const c = await this.js.consumers.get(Streams.dlq, {
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: lo,
      headers_only: true,
    });
    try {
      if ((await c.info(true)).num_pending === 0) return out;
      const messages = await c.consume({ max_messages: 1000 });
      let n = 0;
      for await (const m of messages) {
        if (m.seq > hi) break;
        const r = m.subject.slice('vigil.dlq.'.length);
        out[r] = (out[r] ?? 0) + 1;
        // The API shares the service's main thread: let HTTP in between.
        if (++n % 1000 === 0) await new Promise((r) => setImmediate(r));
        if (m.seq >= hi || m.info.pending === 0) break;
      }
      await messages.close();
    } finally {
      await c.delete().catch(() => undefined);
    }
    return out;
  }

  /**
   * The letters a replay names, whole; sequences `DLQ` does not hold are `missing`. `cursor`: the
   * last `DLQ` sequence a selection by filter covered (0 for one by sequences), where the next
   * replay of the same filter goes on from when `more` says it stopped at its limit.
   */
  async select(
    sel: ReplaySelection,
  ): Promise<{ letters: DeadLetter[]; missing: number[]; more: boolean; cursor: number }> {
    if (sel.kind === 'seqs') {
      const letters: DeadLetter[] = [];
      const missing: number[] = [];
      for (const seq of [...new Set(sel.seqs)].sort((a, b) => a - b)) {
        const m = await this.jsm.streams.getMessage(Streams.dlq, { seq });
        if (m === null || !m.subject.startsWith('vigil.dlq.')) missing.push(seq);
        else
          letters.push(
            deadLetterOf({
              seq: m.seq,
              subject: m.subject,
              storedAt: m.time.getTime(),
              headers: headerRecord(m.header),
              data: m.data,
            }),
          );
      }
      return { letters, missing, more: false, cursor: 0 };
    }
    const page = await this.page({
      ...sel.filter,
      // Oldest first: from `since`, else from the first letter.
      after: sel.filter.after ?? 0,
      limit: sel.limit,
      payload: 'base64',
      waitMs: 0,
    });
    return { letters: page.letters, missing: [], more: page.more, cursor: page.cursor };
  }

  /**
   * The dead letters of one message (its stream and sequence, as the sink records them in
   * `Vigil-Source-Stream` and `Vigil-Source-Seq`), stored after `DLQ` sequence `after`: waits up
   * to `waitMs` for the first, then takes the others already there (one event can fail several
   * rules).
   */
  async lettersOf(
    source: { readonly stream: string; readonly seq: number },
    after: number,
    waitMs: number,
  ): Promise<DeadLetter[]> {
    const found: DeadLetter[] = [];
    const c = await this.js.consumers.get(Streams.dlq, {
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: after + 1,
    });
    try {
      const messages = await c.consume({ max_messages: 100 });
      const timer = setTimeout(() => void messages.close(), waitMs);
      try {
        for await (const m of messages) {
          const l = this.letter(m, PREVIEW_BYTES);
          if (l.source?.stream === source.stream && l.source.seq === source.seq) found.push(l);
          if (found.length > 0 && m.info.pending === 0) break;
        }
      } finally {
        clearTimeout(timer);
        await messages.close();
      }
    } finally {
      await c.delete().catch(() => undefined);
    }
    return found;
  }
}
