import { DeliverPolicy, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { partitionRecord, storedAtMs, Streams } from '../protocol/index.js';

/** An event of `EVENTS` as stored: its payload and when the server stored it. */
export interface SampledEvent {
  readonly data: Uint8Array;
  readonly storedAt: number;
}

/**
 * The events among the last `max` records of `EVENTS` (markers, ticks, probes and records the
 * service would dead-letter left out), read by an ordered consumer that stops at the head; the
 * whole read, server requests included, ends after `timeoutMs` with what it has. A sample for
 * warnings at validation time, never a reason to hold a request for long. Rejects when NATS
 * cannot be asked; the caller answers without a sample then.
 */
export async function recentEvents(
  js: JetStreamClient,
  jsm: JetStreamManager,
  partitions: number,
  max: number,
  timeoutMs = 2000,
): Promise<SampledEvent[]> {
  const out: SampledEvent[] = [];
  let expired!: () => void;
  const timeout = new Promise<void>((r) => (expired = r));
  const timer = setTimeout(() => expired(), timeoutMs);
  const reading = read(js, jsm, partitions, max, out, timeout);
  // Once the time is up nobody awaits the read; it still ends (closes and deletes its consumer).
  void reading.catch(() => undefined);
  try {
    await Promise.race([reading, timeout]);
  } finally {
    clearTimeout(timer);
  }
  return out.slice();
}

async function read(
  js: JetStreamClient,
  jsm: JetStreamManager,
  partitions: number,
  max: number,
  out: SampledEvent[],
  timeout: Promise<void>,
): Promise<void> {
  const { state } = await jsm.streams.info(Streams.events);
  if (state.messages === 0 || max <= 0) return;
  const head = state.last_seq;
  const from = Math.max(state.first_seq, head - max + 1);
  const consumer = await js.consumers.get(Streams.events, {
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: from,
  });
  const messages = await consumer.consume({ max_messages: Math.min(1000, head - from + 1) });
  void timeout.then(() => messages.close());
  try {
    for await (const m of messages) {
      const r = partitionRecord(
        { seq: m.seq, subject: m.subject, data: m.data, storedAt: storedAtMs(m.info) },
        partitions,
        () => undefined,
        () => 0,
      );
      if (r?.record.kind === 'event') out.push({ data: m.data, storedAt: r.record.publishTs });
      if (m.seq >= head || m.info.pending === 0) break;
    }
  } finally {
    await messages.close();
    // The server keeps an ordered consumer for minutes after its last pull: one per validation
    // would pile up.
    await consumer.delete().catch(() => undefined);
  }
}
