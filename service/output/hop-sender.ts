import { createInbox, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { backoffMs } from '../transient.js';

/**
 * How a {@link HopSender} publishes: `send` starts one publish to JetStream and calls `done` once,
 * with no error when the stream stored it.
 */
export interface HopTransport {
  send(subject: string, data: Uint8Array, done: (err?: Error) => void): void;
}

interface Entry {
  readonly id: number;
  readonly subject: string;
  readonly data: Uint8Array;
  state: 'queued' | 'flying' | 'stored';
  /** Which send of it the answer awaited is for: an answer to an earlier one is ignored. */
  attempt: number;
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
  private retries = 0;
  private closed = false;
  private waiters: (() => void)[] = [];

  constructor(
    private readonly transport: HopTransport,
    private readonly maxInFlight: number,
    private readonly onRetry: (subject: string, err: unknown) => void = () => {},
  ) {}

  /**
   * Queues a message after every one queued before. Undefined while fewer than `maxInFlight`
   * are unacknowledged (the usual case); else a promise that resolves once there is room.
   */
  send(subject: string, data: Uint8Array): Promise<void> | undefined {
    if (this.closed) throw new Error('the hop sender is closed');
    this.queue.push({ id: this.nextId++, subject, data, state: 'queued', attempt: 0 });
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
    const attempt = ++e.attempt;
    this.flying++;
    this.transport.send(e.subject, e.data, (err) => {
      if (e.attempt !== attempt || e.state !== 'flying') return;
      this.flying--;
      if (err === undefined) {
        e.state = 'stored';
        this.retries = 0;
        let n = 0;
        while (n < this.queue.length && (this.queue[n] as Entry).state === 'stored') n++;
        if (n > 0) this.queue.splice(0, n);
      } else {
        e.state = 'queued';
        if (!this.closed) this.onRetry(e.subject, err);
        if (this.failed === undefined || e.id < this.failed.id) this.failed = e;
      }
      this.settle();
    });
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
      backoffMs(this.retries++, 50, 2000),
    );
  }
}

/**
 * JetStream publishes on the core connection, their acknowledgements on one inbox subscription:
 * `js.publish` made a request per message (a promise, a timer, a reply subscription entry), most of
 * what a forwarded event cost the sending worker. A publish unanswered after `timeoutMs` counts as
 * failed (the sender sends it again; a late answer is ignored).
 */
export function inboxTransport(
  nc: NatsConnection,
  timeoutMs = 5000,
): HopTransport & { close(): void } {
  const inbox = createInbox();
  const prefix = inbox.length + 1;
  let next = 0;
  const waiting = new Map<number, { readonly done: (err?: Error) => void; readonly at: number }>();
  const sub = nc.subscribe(`${inbox}.*`, {
    callback: (_err, m) => {
      const id = Number(m.subject.slice(prefix));
      const w = waiting.get(id);
      if (w === undefined) return;
      waiting.delete(id);
      w.done(ackError(m));
    },
  });
  const sweep = setInterval(
    () => {
      const now = Date.now();
      for (const [id, w] of waiting)
        if (now - w.at > timeoutMs) {
          waiting.delete(id);
          w.done(new Error(`no acknowledgement from JetStream within ${timeoutMs} ms`));
        }
    },
    Math.min(1000, timeoutMs),
  );
  sweep.unref();
  return {
    send(subject, data, done) {
      const id = ++next;
      waiting.set(id, { done, at: Date.now() });
      nc.publish(subject, data, { reply: `${inbox}.${id}` });
    },
    close() {
      clearInterval(sweep);
      sub.unsubscribe();
      for (const w of waiting.values()) w.done(new Error('the hop transport is closed'));
      waiting.clear();
    },
  };
}

/** Undefined when a JetStream publish's answer says the message is stored; else why not. */
function ackError(m: Msg): Error | undefined {
  // A status message (no stream on the subject: 503) carries no JSON.
  if (m.data.byteLength === 0)
    return new Error(`no stream took the message (${m.headers?.code ?? 'empty answer'})`);
  try {
    const a = JSON.parse(new TextDecoder().decode(m.data)) as {
      seq?: unknown;
      error?: { description?: string };
    };
    // A refusal carries `seq: 0` beside its `error`.
    if (a.error === undefined && typeof a.seq === 'number' && a.seq > 0) return undefined;
    return new Error(`JetStream refused the message: ${a.error?.description ?? 'no sequence'}`);
  } catch {
    return new Error('JetStream answered the publish with something that is not JSON');
  }
}
