import { DeliverPolicy, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { partitionRecord, storedAtMs, Streams } from '../protocol/index.js';

/** An event of `EVENTS` as stored: its payload and when the server stored it. */
export interface SampledEvent {
  readonly data: Uint8Array;
  readonly storedAt: number;
}

/**
 * The events among the last `max` records of `EVENTS` (markers, ticks, probes and records the
 * service would dead-letter left out), read by an ordered consumer that stops at the head or
 * after `timeoutMs`, whichever comes first: a sample for warnings at validation time, never a
 * reason to hold a request for long.
 */
export async function recentEvents(
  js: JetStreamClient,
  jsm: JetStreamManager,
  partitions: number,
  max: number,
  timeoutMs = 2000,
): Promise<SampledEvent[]> {
  const { state } = await jsm.streams.info(Streams.events);
  if (state.messages === 0 || max <= 0) return [];
  const head = state.last_seq;
  const from = Math.max(state.first_seq, head - max + 1);
  const consumer = await js.consumers.get(Streams.events, {
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: from,
  });
  const messages = await consumer.consume({ max_messages: Math.min(1000, head - from + 1) });
  const timer = setTimeout(() => void messages.close(), timeoutMs);
  const out: SampledEvent[] = [];
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
    clearTimeout(timer);
    await messages.close();
  }
  return out;
}
