import type { JetStreamClient } from '@nats-io/jetstream';
import { backoffMs } from '../transient.js';

interface Entry {
  readonly id: number;
  readonly subject: string;
  readonly data: Uint8Array;
  state: 'queued' | 'flying' | 'stored';
}

/**
 * Sends what one source partition sends downstream over the re-keying hop (`REKEY`), in order,
 * with up to `maxInFlight` unacknowledged. A downstream partition takes a source's messages only
 * in their numbered order (see `rules/source-hop.ts`), so a message that was not stored must not
 * be overtaken for good: when a publish fails, the sender waits for those in flight, then sends
 * again everything from the failed one on, in order (go-back-N). What was stored twice is a
 * duplicate the downstream drops; what it dropped as early (after the gap) comes again in its turn.
 * No `Nats-Msg-Id`: the server would drop the second copy of a message the downstream needs again.
 */
export class HopSender {
  /** Unacknowledged messages in send order (and stored ones after them, until they are). */
  private readonly queue: Entry[] = [];
  private flying = 0;
  private nextId = 1;
  /** The earliest message whose publish failed, while going back to it. */
  private failed: Entry | undefined;
  private attempt = 0;
  private closed = false;
  private waiters: (() => void)[] = [];

  constructor(
    private readonly js: Pick<JetStreamClient, 'publish'>,
    private readonly maxInFlight: number,
    private readonly onRetry: (subject: string, err: unknown) => void = () => {},
  ) {}

  /**
   * Queues a message after every one queued before. Undefined while fewer than `maxInFlight`
   * are unacknowledged (the usual case); else a promise that resolves once there is room.
   */
  send(subject: string, data: Uint8Array): Promise<void> | undefined {
    if (this.closed) throw new Error('the hop sender is closed');
    this.queue.push({ id: this.nextId++, subject, data, state: 'queued' });
    this.pump();
    return this.queue.length > this.maxInFlight ? this.until(() => this.roomy()) : undefined;
  }

  /** Resolves once every message queued so far is stored. */
  settled(): Promise<void> {
    const last = this.nextId - 1;
    return this.until(() => (this.queue[0]?.id ?? Infinity) > last);
  }

  /** Messages queued and not yet stored. */
  get pending(): number {
    return this.queue.length;
  }

  /** Stops sending: nothing is tried again, waiters stay pending. */
  close(): void {
    this.closed = true;
  }

  private roomy(): boolean {
    return this.queue.length <= this.maxInFlight;
  }

  private until(ready: () => boolean): Promise<void> {
    if (ready()) return Promise.resolve();
    return new Promise((resolve) => {
      const check = (): void => {
        if (ready()) resolve();
        else this.waiters.push(check);
      };
      this.waiters.push(check);
    });
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private pump(): void {
    if (this.failed !== undefined || this.closed) return;
    for (const e of this.queue) {
      if (this.flying >= this.maxInFlight) break;
      if (e.state === 'queued') this.fly(e);
    }
  }

  private fly(e: Entry): void {
    e.state = 'flying';
    this.flying++;
    this.js.publish(e.subject, e.data).then(
      () => {
        this.flying--;
        e.state = 'stored';
        this.attempt = 0;
        let n = 0;
        while (n < this.queue.length && (this.queue[n] as Entry).state === 'stored') n++;
        if (n > 0) this.queue.splice(0, n);
        this.settle();
      },
      (err: unknown) => {
        this.flying--;
        e.state = 'queued';
        if (!this.closed) this.onRetry(e.subject, err);
        if (this.failed === undefined || e.id < this.failed.id) this.failed = e;
        this.settle();
      },
    );
  }

  /** After an answer: wakes waiters, and once nothing is in flight after a failure, goes back to it. */
  private settle(): void {
    this.wake();
    if (this.failed === undefined) return this.pump();
    if (this.flying > 0 || this.closed) return;
    const from = this.failed.id;
    setTimeout(
      () => {
        // Everything from the failed one on goes again, in order: stored ones too, since the
        // downstream dropped them as early.
        for (const e of this.queue) if (e.id >= from) e.state = 'queued';
        this.failed = undefined;
        this.pump();
      },
      backoffMs(this.attempt++, 50, 2000),
    );
  }
}
