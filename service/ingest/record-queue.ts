import type { LogRecord } from './event-source.js';

/**
 * The records a partition's consumer has received and its runner not yet taken, oldest first.
 * An array read from a moving head: `shift()` would move every record left behind it on each
 * take, and a partition takes tens of thousands a second.
 */
export class RecordQueue {
  private readonly records: (LogRecord | undefined)[] = [];
  private head = 0;

  /** Records waiting. */
  get size(): number {
    return this.records.length - this.head;
  }

  push(r: LogRecord): void {
    this.records.push(r);
  }

  /** The oldest record waiting, removed; undefined when none is. */
  take(): LogRecord | undefined {
    const records = this.records;
    if (this.head >= records.length) return undefined;
    const r = records[this.head] as LogRecord;
    // Cleared as taken, so a record handled is garbage at once rather than kept (with its
    // payload) until the queue next empties.
    records[this.head++] = undefined;
    if (this.head === records.length) records.length = this.head = 0;
    else if (this.head >= 1024 && this.head * 2 >= records.length) {
      records.splice(0, this.head);
      this.head = 0;
    }
    return r;
  }

  clear(): void {
    this.records.length = this.head = 0;
  }
}
