import type { JetStreamClient, JetStreamPublishOptions } from '@nats-io/jetstream';
import { backoffMs } from '../transient.js';

/**
 * Publishes to JetStream with up to `maxInFlight` unacknowledged messages, retrying a failed
 * publish with backoff until it is acknowledged or the publisher is closed: an alert or a
 * dead letter is never given up on while the service runs. `Nats-Msg-Id` makes retries safe.
 *
 * Publishes go out together, once per turn of the event loop. The client writes to its socket in
 * a microtask after the first message it is given, so an alert published on its own was one
 * socket write, a visible share of a worker's time under load (bench/README.md).
 * Held to the next turn, the alerts of every partition of the worker share one write.
 */
export class Publisher {
  private readonly inFlight = new Set<Promise<void>>();
  private closed = false;
  /** Publishes waiting for the next turn, and whether it is scheduled. */
  private waiting: (() => void)[] = [];
  private scheduled = false;

  constructor(
    private readonly js: JetStreamClient,
    private readonly maxInFlight: number,
    private readonly onRetry: (subject: string, err: unknown) => void = () => {},
  ) {}

  /**
   * Starts a publish (it counts for {@link settled} and {@link flush} at once). Returns undefined
   * while fewer than `maxInFlight` are unacknowledged, the usual case, so a caller with more to
   * publish goes on without waiting for a promise; else a promise that resolves once there is room.
   */
  publish(
    subject: string,
    data: Uint8Array | string,
    opts: Partial<JetStreamPublishOptions>,
    /** Called once the stream has stored it, not when its `Nats-Msg-Id` made it a duplicate. */
    onStored?: () => void,
  ): Promise<void> | undefined {
    const p = this.send(subject, data, opts, onStored).finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
    return this.inFlight.size >= this.maxInFlight ? this.room() : undefined;
  }

  /** Waits until every publish started so far is acknowledged. */
  async flush(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  /** Waits until every publish started so far is acknowledged; later ones are not waited for. */
  async settled(): Promise<void> {
    await Promise.all([...this.inFlight]);
  }

  close(): void {
    this.closed = true;
  }

  private async room(): Promise<void> {
    while (this.inFlight.size >= this.maxInFlight) await Promise.race(this.inFlight);
  }

  /**
   * Resolves on the next turn of the event loop, together with every publish waiting for it:
   * their continuations all run before the client's write, which they queue behind themselves.
   */
  private nextTurn(): Promise<void> {
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      if (this.scheduled) return;
      this.scheduled = true;
      setImmediate(() => {
        const go = this.waiting;
        this.waiting = [];
        this.scheduled = false;
        for (const r of go) r();
      });
    });
  }

  private async send(
    subject: string,
    data: Uint8Array | string,
    opts: Partial<JetStreamPublishOptions>,
    onStored: (() => void) | undefined,
  ): Promise<void> {
    await this.nextTurn();
    for (let attempt = 0; ; attempt++) {
      try {
        const ack = await this.js.publish(subject, data, opts);
        if (onStored !== undefined && !ack.duplicate) onStored();
        return;
      } catch (err) {
        if (this.closed) throw err;
        this.onRetry(subject, err);
        await new Promise((r) => setTimeout(r, backoffMs(attempt, 50, 2000)));
      }
    }
  }
}
