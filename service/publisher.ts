import type { JetStreamClient, JetStreamPublishOptions } from '@nats-io/jetstream';

/**
 * Publishes to JetStream with up to `maxInFlight` unacknowledged messages, retrying a failed
 * publish with backoff until it is acknowledged or the publisher is closed: an alert or a
 * dead letter is never given up on while the service runs. `Nats-Msg-Id` makes retries safe.
 */
export class Publisher {
  private readonly inFlight = new Set<Promise<void>>();
  private closed = false;

  constructor(
    private readonly js: JetStreamClient,
    private readonly maxInFlight: number,
    private readonly onRetry: (subject: string, err: unknown) => void = () => {},
  ) {}

  /** Starts a publish; resolves once there is room for another (not when this one is acknowledged). */
  async publish(
    subject: string,
    data: Uint8Array | string,
    opts: Partial<JetStreamPublishOptions>,
  ): Promise<void> {
    const p = this.send(subject, data, opts).finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
    while (this.inFlight.size >= this.maxInFlight) await Promise.race(this.inFlight);
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

  private async send(
    subject: string,
    data: Uint8Array | string,
    opts: Partial<JetStreamPublishOptions>,
  ): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.js.publish(subject, data, opts);
        return;
      } catch (err) {
        if (this.closed) throw err;
        this.onRetry(subject, err);
        await new Promise((r) => setTimeout(r, Math.min(2000, 50 * 2 ** attempt)));
      }
    }
  }
}
