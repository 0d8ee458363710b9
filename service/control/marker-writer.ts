import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { markerPayload, markerSubject, Streams } from '../../protocol/index.js';
import { backoffMs } from '../transient.js';

/**
 * What the marker writer needs of `EVENTS`: {@link jetStreamMarkerLog} on NATS. An interface so
 * that the writer's queue, catch-up and retries can be tested from memory.
 */
export interface MarkerLog {
  /** Stores `data` on `subject`; the server keeps one message per `msgID`. Rejects when not stored. */
  publish(subject: string, data: Uint8Array, msgID: string): Promise<void>;
  /** The payload of the last message stored on `subject`; undefined when there is none. */
  last(subject: string): Promise<Uint8Array | undefined>;
}

/** `EVENTS` on JetStream: publishes with `Nats-Msg-Id`, reads the last message of a subject. */
export function jetStreamMarkerLog(js: JetStreamClient, jsm: JetStreamManager): MarkerLog {
  return {
    async publish(subject, data, msgID) {
      await js.publish(subject, data, { msgID });
    },
    async last(subject) {
      const m = await jsm.streams.getMessage(Streams.events, { last_by_subj: subject });
      return m?.data;
    },
  };
}

const decoder = new TextDecoder();

/**
 * Writes the epoch markers of one worker. The owner of a partition writes a marker into it for
 * every accepted control message; when it starts a partition (at start-up or on a hand-over) it
 * first reads the last marker in the partition's log and writes every accepted one after it, so
 * a partition that changes owner misses none, also those of messages accepted while it had no
 * owner (`Nats-Msg-Id: epoch-<c>-<p>` absorbs one a previous owner wrote too). One queue for
 * all of them, so a catch-up and the markers of new messages never race.
 */
export class MarkerWriter {
  private readonly accepted: number[] = [];
  private readonly last = new Map<number, number>();
  private readonly partitions = new Set<number>();
  private queue = Promise.resolve();

  constructor(
    private readonly markerLog: MarkerLog,
    private readonly log: (level: 'warn' | 'error', message: string) => void,
  ) {}

  /** An accepted control message at `seq`: resolves once its marker is in every partition written for. */
  accept(seq: number): Promise<void> {
    this.accepted.push(seq);
    // All partitions at once: one round trip for the lot, not one per partition (activation
    // latency). Each partition still gets its markers in order: accepts run one after another.
    return this.enqueue(async () => {
      await Promise.all([...this.partitions].map((p) => this.write(p, seq)));
    });
  }

  /**
   * Starts writing the markers of partition `p`, beginning with those its log lacks;
   * `owned()` says whether the partition is still run here when the catch-up begins.
   */
  add(p: number, owned: () => boolean): Promise<void> {
    return this.enqueue(async () => {
      this.last.set(p, await this.lastInLog(p));
      if (!owned()) return;
      this.partitions.add(p);
      for (const seq of this.accepted) {
        if (!this.partitions.has(p)) return;
        await this.write(p, seq);
      }
    });
  }

  /** Stops writing into partition `p` at once (a publish under way still completes). */
  remove(p: number): void {
    this.partitions.delete(p);
    this.last.delete(p);
  }

  private enqueue(fn: () => Promise<void>): Promise<void> {
    this.queue = this.queue
      .then(fn)
      .catch((err: Error) => this.log('error', `markers: ${err.message}`));
    return this.queue;
  }

  private async lastInLog(p: number): Promise<number> {
    const last = await this.markerLog.last(markerSubject(p)).catch(() => undefined);
    try {
      return last
        ? Number((JSON.parse(decoder.decode(last)) as { controlSeq?: unknown }).controlSeq) || 0
        : 0;
    } catch {
      return 0;
    }
  }

  private async write(p: number, seq: number): Promise<void> {
    if ((this.last.get(p) ?? 0) >= seq) return;
    // A timed-out publish must not end the control loop: retry (Nats-Msg-Id makes it safe).
    for (let attempt = 0; this.partitions.has(p); attempt++) {
      try {
        await this.markerLog.publish(markerSubject(p), markerPayload(seq), `epoch-${seq}-${p}`);
        this.last.set(p, seq);
        return;
      } catch (err) {
        this.log(
          'warn',
          `marker ${seq} for partition ${p} not stored, retrying: ${(err as Error).message}`,
        );
        await new Promise((r) => setTimeout(r, backoffMs(attempt, 100, 2000)));
      }
    }
  }
}
