import {
  markerPayload,
  markerSubject,
  partitionedEventSubject,
  tickPayload,
  tickSubject,
} from '../../protocol/index.js';
import type { EventSource, LogRecord } from '../../service/index.js';

const encoder = new TextEncoder();

/**
 * A partition's log in memory, fed by the test: the `EventSource` a `PartitionRunner` reads.
 * Records get increasing sequences (from 1 by default). `caughtUp` answers as the server would
 * (nothing waiting, the last record handled is the last one pushed).
 */
export class MemoryEventSource implements EventSource {
  private readonly queue: LogRecord[] = [];
  private stopped = false;
  private wake: (() => void) | undefined;
  private idle: (() => void)[] = [];
  private seq: number;
  /** Every `lastHandled` a `caughtUp` call was asked with, in order. */
  readonly caughtUpAsked: number[] = [];

  constructor(
    readonly partition: number,
    /** The sequence of the record before the first pushed. */
    lastSeq = 0,
  ) {
    this.seq = lastSeq;
  }

  /** The sequence of the last record pushed. */
  get lastSeq(): number {
    return this.seq;
  }

  /** Appends a record; `storedAt` is when the log stored it. */
  push(subject: string, data: string | Uint8Array, storedAt: number): LogRecord {
    const r: LogRecord = {
      seq: ++this.seq,
      subject,
      data: typeof data === 'string' ? encoder.encode(data) : data,
      storedAt,
      pending: 0,
    };
    this.queue.push(r);
    this.signal();
    return r;
  }

  /** An event of `key` (its subject on this partition) with `fields`, stored at `storedAt` (default: its `ts`). */
  event(key: string, fields: Record<string, unknown>, storedAt?: number): LogRecord {
    const at = storedAt ?? (typeof fields.ts === 'number' ? fields.ts : 0);
    return this.push(partitionedEventSubject(key, this.partition), JSON.stringify(fields), at);
  }

  marker(controlSeq: number, storedAt = 0): LogRecord {
    return this.push(markerSubject(this.partition), markerPayload(controlSeq), storedAt);
  }

  tick(ts: number, storedAt = ts): LogRecord {
    return this.push(tickSubject(this.partition), tickPayload(ts), storedAt);
  }

  /**
   * Resolves once the reader has taken and handled every record pushed so far and waits for
   * more (a `PartitionRunner` calls `wait` only between records), or the source has ended.
   */
  drained(): Promise<void> {
    if (this.stopped && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  next(): LogRecord | undefined {
    return this.queue.shift();
  }

  wait(): Promise<void> {
    if (this.queue.length > 0 || this.stopped) return Promise.resolve();
    for (const f of this.idle.splice(0)) f();
    return new Promise<void>((resolve) => (this.wake = resolve));
  }

  get ended(): boolean {
    return this.stopped && this.queue.length === 0;
  }

  stop(): Promise<void> {
    // As the JetStream source: records not taken yet are never handed out.
    this.stopped = true;
    this.queue.length = 0;
    this.signal();
    for (const f of this.idle.splice(0)) f();
    return Promise.resolve();
  }

  caughtUp(lastHandled: number): Promise<boolean> {
    this.caughtUpAsked.push(lastHandled);
    return Promise.resolve(!this.stopped && this.queue.length === 0 && lastHandled === this.seq);
  }

  private signal(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }
}
