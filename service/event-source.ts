import { DeliverPolicy, type ConsumerMessages, type JetStreamClient } from '@nats-io/jetstream';
import { partitionFilter, Streams } from './subjects.js';

/**
 * When the server stored a message, in whole milliseconds since the epoch: the default event time
 * (DESIGN §3), integer like a payload's `ts`. The service, back-tests and the tests' reference
 * run all read it through this, so they judge every event at the same time.
 */
export function storedAtMs(info: { readonly timestampNanos: number }): number {
  return Math.floor(info.timestampNanos / 1_000_000);
}

/** One message of a partition's log. */
export interface LogRecord {
  readonly seq: number;
  readonly subject: string;
  readonly data: Uint8Array;
  /** When the server stored it (ms since the epoch): the default event time. */
  readonly storedAt: number;
  /** Messages of the partition still behind this one. */
  readonly pending: number;
}

/** The records of one partition, in log order. */
export interface EventSource extends AsyncIterable<LogRecord> {
  /** Ends the iteration (after the record being handled). */
  stop(): Promise<void>;
}

/**
 * A partition's log read with a JetStream ordered consumer filtered on `events.*.<p>`: events,
 * markers and ticks of the partition in one order, no acks, no hop through another thread.
 */
export async function jetStreamPartitionSource(
  js: JetStreamClient,
  partition: number,
  fromSeq = 1,
): Promise<EventSource> {
  const consumer = await js.consumers.get(Streams.events, {
    filter_subjects: partitionFilter(partition),
    ...(fromSeq > 1
      ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: fromSeq }
      : { deliver_policy: DeliverPolicy.All }),
  });
  const messages: ConsumerMessages = await consumer.consume({ max_messages: 2000 });
  let read = false;
  return {
    async *[Symbol.asyncIterator]() {
      read = true;
      for await (const m of messages) {
        yield {
          seq: m.seq,
          subject: m.subject,
          data: m.data,
          storedAt: storedAtMs(m.info),
          pending: m.info.pending,
        };
      }
    },
    async stop() {
      const closed = messages.close();
      // close() resolves once the iterator has handed out what it holds: a source no one reads
      // (a partition abandoned while it opened) would wait forever, its consumer still pulling.
      if (!read) {
        read = true;
        void (async () => {
          for await (const _ of messages);
        })().catch(() => undefined);
      }
      await closed;
    },
  };
}
