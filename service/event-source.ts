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

/**
 * The records of one partition, in log order, taken one at a time without a promise per record:
 * a partition reads tens of thousands of records a second, and an async iterator's hops cost
 * about as much per record as the client's own parsing (`.scratch` measurements in
 * bench/README.md). `next()` hands out what has arrived; `wait()` resolves when more does.
 */
export interface EventSource {
  /**
   * The next record received and not yet taken; undefined when none is waiting (see `wait`) or
   * the source has ended (see `ended`).
   * @throws what ended the source, once every record received before it has been taken.
   */
  next(): LogRecord | undefined;
  /** Resolves when a record arrives or the source ends. */
  wait(): Promise<void>;
  /** True once the source has stopped and every record it will hand out has been taken. */
  readonly ended: boolean;
  /** Ends the records: after the one being handled, `next()` hands out no more. */
  stop(): Promise<void>;
}

/**
 * A partition's log read with a JetStream ordered consumer filtered on `events.*.<p>`: events,
 * markers and ticks of the partition in one order, no acks, no hop through another thread. The
 * client hands each message to a callback, which queues the record.
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
  // A queue with a moving head: records are taken in the order they arrived. A slot is cleared
  // as its record is taken, so that a record handled is garbage at once: kept until the queue
  // next emptied, the records of a pull (up to 2,000) outlived the young generation's
  // collections with their payloads and subjects.
  const queue: (LogRecord | undefined)[] = [];
  let head = 0;
  let stopped = false;
  let failure: Error | undefined;
  let wake: (() => void) | undefined;
  const signal = (): void => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const messages: ConsumerMessages = await consumer.consume({
    max_messages: 2000,
    callback: (m) => {
      queue.push({
        seq: m.seq,
        subject: m.subject,
        data: m.data,
        storedAt: storedAtMs(m.info),
        pending: m.info.pending,
      });
      signal();
    },
  });
  void messages.closed().then((err) => {
    stopped = true;
    if (err) failure = err;
    signal();
  });
  return {
    next() {
      if (head < queue.length) {
        const r = queue[head] as LogRecord;
        queue[head++] = undefined;
        if (head === queue.length) queue.length = head = 0;
        // While records keep arriving the queue may never empty: drop the taken slots now and
        // then, or the array would grow with every record read in a long drain.
        else if (head >= 1024 && head * 2 >= queue.length) {
          queue.splice(0, head);
          head = 0;
        }
        return r;
      }
      if (failure !== undefined) throw failure;
      return undefined;
    },
    wait() {
      if (head < queue.length || stopped) return Promise.resolve();
      return new Promise<void>((resolve) => (wake = resolve));
    },
    get ended() {
      return stopped && head >= queue.length;
    },
    async stop() {
      // The record being handled is the last: the rest were never taken, and the next owner (or
      // this one, after a restart) reads them again from the checkpoint's offset.
      stopped = true;
      queue.length = head = 0;
      await messages.close();
      signal();
    },
  };
}
