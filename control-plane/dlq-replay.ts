import { headers as natsHeaders } from '@nats-io/transport-node';
import type { JetStreamClient } from '@nats-io/jetstream';
import { replayMsgId, replayTarget, type DeadLetter } from './dlq-letter.js';

/** What happened to one dead letter a replay selected. */
export interface ReplayOutcome {
  readonly seq: number;
  readonly outcome: 'replayed' | 'duplicate' | 'failed' | 'would-replay';
  readonly reason?: string;
  readonly subject?: string;
  /** Where the replay was stored in `EVENTS` (replayed, or duplicate: where the first replay was). */
  readonly eventsSeq?: number;
  readonly error?: string;
}

/** The answer of a replay: how many went back, were duplicates, failed; each letter's outcome. */
export interface ReplayReport {
  readonly dryRun: boolean;
  readonly selected: number;
  readonly replayed: number;
  readonly duplicates: number;
  readonly failed: number;
  readonly wouldReplay: number;
  /** The selection stopped at its limit: more letters match. */
  readonly more: boolean;
  /**
   * With `more`: the last `DLQ` sequence this replay covered; the same filter with
   * `"after": cursor` goes on from there (0 for a replay by sequences).
   */
  readonly cursor: number;
  readonly results: readonly ReplayOutcome[];
}

/** Counts the outcomes, in `DLQ` order. */
export function replayReport(
  outcomes: readonly ReplayOutcome[],
  dryRun: boolean,
  more: boolean,
  cursor = 0,
): ReplayReport {
  const results = [...outcomes].sort((a, b) => a.seq - b.seq);
  const count = (o: ReplayOutcome['outcome']) => results.filter((r) => r.outcome === o).length;
  return {
    dryRun,
    selected: results.length,
    replayed: count('replayed'),
    duplicates: count('duplicate'),
    failed: count('failed'),
    wouldReplay: count('would-replay'),
    more,
    cursor,
    results,
  };
}

/**
 * Publishes each letter's original payload (and the producer's headers, not Vigil's) to its
 * source subject, in `DLQ` order, with `Nats-Msg-Id` {@link replayMsgId}: `EVENTS` refuses a
 * second replay of a letter within its duplicate window and says so (`duplicate`). A publish
 * that times out ends the run: NATS is away, and the rest are reported as not tried.
 */
export async function replayLetters(
  js: JetStreamClient,
  letters: readonly DeadLetter[],
  dryRun: boolean,
): Promise<ReplayOutcome[]> {
  const out: ReplayOutcome[] = [];
  let away: string | undefined;
  for (const l of letters) {
    const target = replayTarget(l);
    const base = { seq: l.seq, reason: l.reason };
    if (!target.ok) {
      out.push({ ...base, outcome: 'failed', error: target.why });
      continue;
    }
    const subject = target.subject;
    if (dryRun) {
      out.push({ ...base, outcome: 'would-replay', subject });
      continue;
    }
    if (away !== undefined) {
      out.push({ ...base, outcome: 'failed', subject, error: `not tried: ${away}` });
      continue;
    }
    const entries = Object.entries(l.producerHeaders);
    const h = entries.length === 0 ? undefined : natsHeaders();
    for (const [k, v] of entries) h?.set(k, v);
    try {
      const ack = await js.publish(subject, l.data, {
        msgID: replayMsgId(l.seq),
        timeout: 5000,
        ...(h === undefined ? {} : { headers: h }),
      });
      out.push({
        ...base,
        outcome: ack.duplicate ? 'duplicate' : 'replayed',
        subject,
        eventsSeq: ack.seq,
      });
    } catch (e) {
      const message = (e as Error).message;
      if ((e as Error).name === 'TimeoutError')
        away = `NATS did not answer a publish within 5 s (${message})`;
      out.push({
        ...base,
        outcome: 'failed',
        subject,
        error: /not enabled|no responders/i.test(message) ? `no stream stores ${subject}` : message,
      });
    }
  }
  return out;
}
