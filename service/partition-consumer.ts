import { randomBytes } from 'node:crypto';
import { nuid, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import {
  AckPolicy,
  DeliverPolicy,
  type ConsumerConfig,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { storedAtMs, type EventSource, type LogRecord } from './event-source.js';
import { partitionFilter, Streams } from './subjects.js';

/** Records asked for at once, and the number still on their way below which more are asked for. */
const PULL_BATCH = 2000;
const PULL_REFILL_AT = 1500;
/** A pull request's life on the server; an expired one is answered (408) and renewed. */
const PULL_EXPIRES_MS = 30_000;
/**
 * The server sends a heartbeat this often while a pull waits with nothing to deliver. Nothing
 * at all for two of them means the consumer is gone (a restarted server, a deleted consumer):
 * it is made again from the next record wanted.
 */
const HEARTBEAT_MS = 5_000;
/** Idle consumers left by a process that died are removed by the server after this. */
const INACTIVE_THRESHOLD_MS = 5 * 60_000;
const RETRY_MIN_MS = 100;
const RETRY_MAX_MS = 5_000;

const nanos = (ms: number): number => ms * 1_000_000;

/** What the reply subject of a JetStream message says about it. */
export interface AckReplyInfo {
  streamSeq: number;
  deliverySeq: number;
  /** When the server stored it, in whole ms since the epoch ({@link storedAtMs}). */
  storedAt: number;
  pending: number;
}

/**
 * Reads `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<nanos>.<pending>` (and the form
 * with domain and account hash in front and a random token at the end) into `out`, without
 * splitting it: a partition reads tens of thousands a second, and the client's `split` into
 * eleven strings was 7% of a worker's time in `bench:e2e` (b). False if it is not one.
 */
export function parseAckReply(reply: string, out: AckReplyInfo): boolean {
  if (!reply.startsWith('$JS.ACK.')) return false;
  // The dots after `$JS.ACK.`: 6 in the short form, 9 in the long one.
  const dots = DOTS;
  let k = 0;
  for (let j = reply.indexOf('.', 8); j >= 0; j = reply.indexOf('.', j + 1)) {
    if (k === 9) return false;
    dots[k++] = j;
  }
  // The number tokens follow `<stream>.<consumer>`: after dot 1 (short) or dot 3 (long).
  const b = k === 6 ? 1 : k === 9 ? 3 : -1;
  if (b < 0) return false;
  const end = k === 6 ? reply.length : (dots[8] as number);
  const d0 = dots[b] as number;
  const d1 = dots[b + 1] as number;
  const d2 = dots[b + 2] as number;
  const d3 = dots[b + 3] as number;
  const d4 = dots[b + 4] as number;
  const d5 = k === 6 ? end : (dots[b + 5] as number);
  if (digits(reply, d0 + 1, d1) < 0) return false;
  const sseq = digits(reply, d1 + 1, d2);
  const dseq = digits(reply, d2 + 1, d3);
  const pending = digits(reply, d4 + 1, d5);
  if (sseq < 0 || dseq < 0 || pending < 0) return false;
  // The time as `storedAtMs` computes it from the client's parse (parseInt of the digits), so
  // that the service and the readers that use the client (back-tests, the tests' reference run)
  // judge every event at the same ms. Its digits are checked first, as parseInt would stop at a
  // bad one.
  for (let i = d3 + 1; i < d4; i++) {
    const c = reply.charCodeAt(i);
    if (c < 48 || c > 57) return false;
  }
  if (d4 === d3 + 1) return false;
  out.streamSeq = sseq;
  out.deliverySeq = dseq;
  out.storedAt = storedAtMs({ timestampNanos: parseInt(reply.slice(d3 + 1, d4), 10) });
  out.pending = pending;
  return true;
}

const DOTS = new Int32Array(9);

/** The number written in `s[start, end)`, or -1 unless it is one or more decimal digits. */
function digits(s: string, start: number, end: number): number {
  if (end <= start) return -1;
  let v = 0;
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return -1;
    v = v * 10 + c;
  }
  return v;
}

/** One watcher of a connection's status per connection, shared by its partitions. */
const reconnectListeners = new WeakMap<NatsConnection, Set<() => void>>();

function onReconnect(nc: NatsConnection, listener: () => void): () => void {
  let set = reconnectListeners.get(nc);
  if (set === undefined) {
    const listeners = new Set<() => void>();
    set = listeners;
    reconnectListeners.set(nc, listeners);
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === 'reconnect') for (const l of [...listeners]) l();
      }
    })().catch(() => undefined);
  }
  set.add(listener);
  const listeners = set;
  return () => listeners.delete(listener);
}

/**
 * A partition's log read as JetStream's ordered consumer reads it — an ephemeral consumer
 * filtered on `events.*.<p>`, no acks, made again from the next record wanted whenever a delivery
 * is missed, the consumer disappears or the connection comes back — but on a plain subscription:
 * the client's consumer builds a message object, splits the reply subject into eleven strings and
 * parses five numbers from them for every record, about 1.3 µs of the ~4 µs the ceiling of
 * `bench:e2e` spends per record (`.scratch` measurement in bench/README.md).
 */
export class PartitionConsumer implements EventSource {
  private readonly queue: (LogRecord | undefined)[] = [];
  private head = 0;
  private stopped = false;
  private failure: Error | undefined;
  private wake: (() => void) | undefined;
  /** The stream sequence of the next record wanted: where a consumer made again starts. */
  private nextSeq: number;
  private name = '';
  private sub: Subscription | undefined;
  private lastDelivery = 0;
  /** Records asked for and not yet delivered (or released by a status message). */
  private asked = 0;
  private lastHeard = Date.now();
  private remaking: Promise<void> | undefined;
  private readonly timer: ReturnType<typeof setInterval>;
  private readonly unlisten: () => void;
  private readonly info: AckReplyInfo = { streamSeq: 0, deliverySeq: 0, storedAt: 0, pending: 0 };
  private readonly nextSubject: (name: string) => string;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly jsm: JetStreamManager,
    private readonly partition: number,
    fromSeq: number,
  ) {
    this.nextSeq = Math.max(1, fromSeq);
    const prefix = jsm.getOptions().apiPrefix ?? '$JS.API';
    this.nextSubject = (name) => `${prefix}.CONSUMER.MSG.NEXT.${Streams.events}.${name}`;
    this.timer = setInterval(() => {
      if (
        !this.stopped &&
        this.remaking === undefined &&
        Date.now() - this.lastHeard > 2 * HEARTBEAT_MS
      )
        this.remake();
    }, HEARTBEAT_MS);
    this.unlisten = onReconnect(nc, () => this.remake());
  }

  /** Makes the consumer and starts reading; rejects (with nothing left open) if the first consumer cannot be made. */
  static async open(
    nc: NatsConnection,
    jsm: JetStreamManager,
    partition: number,
    fromSeq: number,
  ): Promise<PartitionConsumer> {
    const c = new PartitionConsumer(nc, jsm, partition, fromSeq);
    try {
      await c.make();
    } catch (e) {
      c.stopped = true;
      c.close();
      throw e;
    }
    return c;
  }

  next(): LogRecord | undefined {
    const queue = this.queue;
    if (this.head < queue.length) {
      const r = queue[this.head] as LogRecord;
      // Cleared as taken, so a record handled is garbage at once rather than kept (with its
      // payload) until the queue next empties.
      queue[this.head++] = undefined;
      if (this.head === queue.length) queue.length = this.head = 0;
      else if (this.head >= 1024 && this.head * 2 >= queue.length) {
        queue.splice(0, this.head);
        this.head = 0;
      }
      return r;
    }
    if (this.failure !== undefined) throw this.failure;
    return undefined;
  }

  wait(): Promise<void> {
    if (this.head < this.queue.length || this.stopped) return Promise.resolve();
    return new Promise<void>((resolve) => (this.wake = resolve));
  }

  get ended(): boolean {
    return this.stopped && this.head >= this.queue.length;
  }

  async stop(): Promise<void> {
    // The record being handled is the last: the rest were never taken, and the next owner (or
    // this one, after a restart) reads them again from the checkpoint's offset.
    this.stopped = true;
    this.queue.length = this.head = 0;
    const name = this.name;
    this.close();
    this.signal();
    if (name !== '' && !this.nc.isClosed())
      await this.jsm.consumers.delete(Streams.events, name).catch(() => undefined);
  }

  private close(): void {
    clearInterval(this.timer);
    this.unlisten();
    this.sub?.unsubscribe();
    this.sub = undefined;
  }

  private signal(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  private fail(err: Error): void {
    if (this.stopped) return;
    this.failure = err;
    this.stopped = true;
    this.close();
    this.signal();
  }

  /** Makes a consumer from `nextSeq` on a new inbox, so nothing the old one sent is read. */
  private async make(): Promise<void> {
    // Short: the name is in the reply subject of every record, which the client parses byte by
    // byte (15 bytes fewer than with a nuid). 72 random bits keep names of processes apart.
    const name = `v${this.partition}_${randomBytes(9).toString('base64url')}`;
    const config: Partial<ConsumerConfig> = {
      name,
      filter_subject: partitionFilter(this.partition),
      ack_policy: AckPolicy.None,
      max_deliver: 1,
      mem_storage: true,
      num_replicas: 1,
      inactive_threshold: nanos(INACTIVE_THRESHOLD_MS),
      ...(this.nextSeq > 1
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: this.nextSeq }
        : { deliver_policy: DeliverPolicy.All }),
    };
    await this.jsm.consumers.add(Streams.events, config);
    if (this.stopped) {
      await this.jsm.consumers.delete(Streams.events, name).catch(() => undefined);
      return;
    }
    this.name = name;
    this.lastDelivery = 0;
    this.asked = 0;
    this.lastHeard = Date.now();
    const sub = this.nc.subscribe(`_INBOX.${nuid.next()}`, {
      callback: (err, msg) => {
        if (sub !== this.sub) return;
        if (err) this.fail(err);
        else this.onMessage(msg);
      },
    });
    this.sub = sub;
    this.pull();
  }

  /** Drops the consumer and makes another from the next record wanted, retrying until it can. */
  private remake(): void {
    if (this.stopped || this.remaking !== undefined) return;
    const old = this.name;
    this.sub?.unsubscribe();
    this.sub = undefined;
    this.remaking = (async () => {
      if (old !== '') void this.jsm.consumers.delete(Streams.events, old).catch(() => undefined);
      for (let attempt = 0; !this.stopped; attempt++) {
        try {
          await this.make();
          return;
        } catch {
          const ms = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** attempt);
          await new Promise((r) => setTimeout(r, ms));
        }
      }
    })().finally(() => (this.remaking = undefined));
  }

  private pull(): void {
    const batch = PULL_BATCH - this.asked;
    if (batch <= 0 || this.sub === undefined) return;
    this.asked += batch;
    this.nc.publish(
      this.nextSubject(this.name),
      JSON.stringify({
        batch,
        expires: nanos(PULL_EXPIRES_MS),
        idle_heartbeat: nanos(HEARTBEAT_MS),
      }),
      { reply: this.sub.getSubject() },
    );
  }

  private onMessage(msg: Msg): void {
    this.lastHeard = Date.now();
    const reply = msg.reply ?? '';
    if (reply === '') return this.onStatus(msg);
    const info = this.info;
    if (!parseAckReply(reply, info)) return;
    if (info.deliverySeq !== this.lastDelivery + 1) return this.remake();
    this.lastDelivery = info.deliverySeq;
    this.nextSeq = info.streamSeq + 1;
    this.queue.push({
      seq: info.streamSeq,
      subject: msg.subject,
      data: msg.data,
      storedAt: info.storedAt,
      pending: info.pending,
    });
    if (--this.asked <= PULL_REFILL_AT) this.pull();
    this.signal();
  }

  /** Heartbeats (100) say the consumer lives; 404/408/409 release what a pull had asked for. */
  private onStatus(msg: Msg): void {
    const h = msg.headers;
    if (h === undefined) return;
    const code = h.code;
    if (code === 100) return;
    if (code === 400) {
      this.fail(
        new Error(`JetStream refused a pull for partition ${this.partition}: ${h.description}`),
      );
      return;
    }
    if (code === 409 && /consumer (is )?deleted|leadership change/i.test(h.description)) {
      this.remake();
      return;
    }
    const left = Number(h.get('Nats-Pending-Messages'));
    this.asked = Number.isFinite(left) && left > 0 ? Math.max(0, this.asked - left) : 0;
    if (this.asked <= PULL_REFILL_AT) this.pull();
  }
}

/**
 * A partition's log from stream sequence `fromSeq` on: events, markers and ticks of the partition
 * in one order (see {@link PartitionConsumer}).
 */
export function jetStreamPartitionSource(
  nats: { readonly nc: NatsConnection; readonly jsm: JetStreamManager },
  partition: number,
  fromSeq = 1,
): Promise<EventSource> {
  return PartitionConsumer.open(nats.nc, nats.jsm, partition, fromSeq);
}
