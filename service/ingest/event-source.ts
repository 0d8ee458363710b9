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
  /**
   * True when every record of the log has been taken and the last one taken is `lastHandled`: the
   * partition is idle, not behind. Only then may a tick move its event time on.
   */
  caughtUp(lastHandled: number): Promise<boolean>;
}
