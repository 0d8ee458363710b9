import { DeliverPolicy, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { Streams } from '../protocol/index.js';

/** One stored message of `CONTROL`. */
export interface ControlRecord {
  readonly seq: number;
  readonly data: Uint8Array;
  /** When `CONTROL` stored it (ms since the epoch). */
  readonly committedAt: number;
}

/** The messages of `CONTROL` in order, from the first, as they arrive; ends once closed. */
export interface ControlReader extends AsyncIterable<ControlRecord> {
  close(): Promise<void>;
}

/**
 * `CONTROL` as the `ControlFollower` reads it: {@link jetStreamControl} on NATS. An interface
 * so that the follower's fold can be fed from memory in unit tests.
 */
export interface ControlStream {
  /** The last sequence `CONTROL` holds now (asks the server). */
  head(): Promise<number>;
  /** Starts reading every message, from the first. */
  read(): Promise<ControlReader>;
}

/** `CONTROL` on JetStream: the head from the stream's info, the messages through an ordered consumer. */
export function jetStreamControl(js: JetStreamClient, jsm: JetStreamManager): ControlStream {
  return {
    head: async () => (await jsm.streams.info(Streams.control)).state.last_seq,
    async read() {
      const consumer = await js.consumers.get(Streams.control, {
        deliver_policy: DeliverPolicy.All,
      });
      const messages = await consumer.consume();
      return {
        async *[Symbol.asyncIterator]() {
          for await (const m of messages)
            yield {
              seq: m.seq,
              data: m.data,
              committedAt: Number(m.info.timestampNanos / 1_000_000),
            };
        },
        async close() {
          await messages.close();
        },
      };
    },
  };
}
