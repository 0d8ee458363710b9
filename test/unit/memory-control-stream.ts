import type { ControlReader, ControlRecord, ControlStream } from '../../jetstream/index.js';

const encoder = new TextEncoder();

/**
 * `CONTROL` in memory, fed by the test: the `ControlStream` a `ControlFollower` reads. Messages
 * get sequences 1, 2, …; `head` counts every message appended, readers receive them in order.
 * While paused, messages are stored (the head moves) but not delivered: a follower that has not
 * read them yet.
 */
export class MemoryControlStream implements ControlStream {
  private readonly log: ControlRecord[] = [];
  private paused = false;
  private readonly wakers = new Set<() => void>();
  /** Readers opened and not closed. */
  open = 0;
  /** `head` calls. */
  headCalls = 0;

  /** Appends a message (JSON-encoded unless bytes) stored at `committedAt`; returns its sequence. */
  append(message: unknown, committedAt = Date.now()): number {
    const data = message instanceof Uint8Array ? message : encoder.encode(JSON.stringify(message));
    const seq = this.log.length + 1;
    this.log.push({ seq, data, committedAt });
    this.wakeAll();
    return seq;
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
    this.wakeAll();
  }

  head(): Promise<number> {
    this.headCalls++;
    return Promise.resolve(this.log.length);
  }

  read(): Promise<ControlReader> {
    const reader = { closed: false, wake: undefined as (() => void) | undefined };
    this.open++;
    return Promise.resolve({
      [Symbol.asyncIterator]: () => this.deliver(reader),
      close: () => {
        if (!reader.closed) this.open--;
        reader.closed = true;
        const w = reader.wake;
        if (w !== undefined) {
          this.wakers.delete(w);
          w();
        }
        return Promise.resolve();
      },
    });
  }

  private async *deliver(reader: {
    closed: boolean;
    wake: (() => void) | undefined;
  }): AsyncGenerator<ControlRecord> {
    for (let i = 0; !reader.closed;) {
      const r = this.log[i];
      if (r !== undefined && !this.paused) {
        i++;
        yield r;
        continue;
      }
      await new Promise<void>((resolve) => {
        reader.wake = resolve;
        this.wakers.add(resolve);
      });
    }
  }

  private wakeAll(): void {
    const w = [...this.wakers];
    this.wakers.clear();
    for (const f of w) f();
  }
}
