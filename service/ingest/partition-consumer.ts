import { randomBytes } from 'node:crypto';
import { nuid, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import {
  AckPolicy,
  DeliverPolicy,
  type ConsumerConfig,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { parseAckReply, type AckReplyInfo } from './ack-reply.js';
import { watchConnection, type ConnectionEvent } from './connection-watch.js';
import { ServiceError, ServiceErrorCode } from '../errors.js';
import type { EventSource, LogRecord } from './event-source.js';
import { pullRefused, pullStatus } from './pull-status.js';
import { RecordQueue } from './record-queue.js';
import { partitionFilter, rekeySubject, Streams } from '../../protocol/index.js';
import { backoffMs } from '../transient.js';

/**
 * Records asked for or waiting to be taken, at most (fewer if the server's `max_request_batch` is
 * lower), and the share of it below which more are asked for. Counting the records not yet taken
 * is the flow control: a partition that reads slower than the server delivers (a backlog, a
 * marker waiting for its control message) holds at most this many, not its whole log.
 */
const PULL_BATCH = 2000;
const PULL_REFILL_SHARE = 0.75;
/** A pull request's life on the server; an expired one is answered (408) and renewed. */
const PULL_EXPIRES_MS = 30_000;
/**
 * The server sends a heartbeat this often while a pull waits with nothing to deliver. Nothing
 * at all for MISSED_HEARTBEATS checks means the consumer is gone (a restarted server, a deleted
 * consumer): it is made again from the next record wanted.
 */
const HEARTBEAT_MS = 5_000;
const MISSED_HEARTBEATS = 3;
/** How long `stop` waits for the server to delete the consumer. */
const STOP_DELETE_MS = 2_000;
/** Idle consumers left by a process that died are removed by the server after this. */
const INACTIVE_THRESHOLD_MS = 5 * 60_000;
const RETRY_MIN_MS = 100;
const RETRY_MAX_MS = 5_000;

const nanos = (ms: number): number => ms * 1_000_000;

/**
 * A partition's log read as JetStream's ordered consumer reads it — an ephemeral consumer
 * filtered on `events.*.<p>`, no acks, made again from the next record wanted whenever a delivery
 * is skipped, the server says the consumer is gone, heartbeats stop or the connection comes back —
 * but on a plain subscription: the client's consumer builds a message object and splits the reply
 * subject into eleven strings for every record (see {@link parseAckReply}).
 */
export class PartitionConsumer implements EventSource {
  private readonly queue = new RecordQueue();
  private stopped = false;
  private failure: Error | undefined;
  private wake: (() => void) | undefined;
  /** The stream sequence of the next record wanted: where a consumer made again starts. */
  private nextSeq: number;
  /** The consumer reading now; '' while one is being made. */
  private name = '';
  private sub: Subscription | undefined;
  private lastDelivery = 0;
  /** Records asked for and not yet delivered (or released by a status message). */
  private asked = 0;
  private batch = PULL_BATCH;
  /** Heartbeat checks since the server last sent anything. */
  private missed = 0;
  private disconnected = false;
  /** The consumer being made (at open, or again); `again` asks for another one after it. */
  private remaking: Promise<void> | undefined;
  private again = false;
  private retry: { timer: ReturnType<typeof setTimeout>; done: () => void } | undefined;
  private readonly timer: ReturnType<typeof setInterval>;
  private readonly unwatch: () => void;
  private readonly info: AckReplyInfo = { streamSeq: 0, deliverySeq: 0, storedAt: 0, pending: 0 };
  private readonly nextSubject: (name: string) => string;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly jsm: JetStreamManager,
    private readonly log: LogSpec,
    fromSeq: number,
  ) {
    this.nextSeq = Math.max(1, fromSeq);
    const prefix = jsm.getOptions().apiPrefix ?? '$JS.API';
    this.nextSubject = (name) => `${prefix}.CONSUMER.MSG.NEXT.${log.stream}.${name}`;
    this.timer = setInterval(() => this.checkHeartbeats(), HEARTBEAT_MS);
    this.unwatch = watchConnection(nc, (e) => this.onConnection(e));
  }

  /** Makes the consumer and starts reading; rejects (with nothing left open) if the first consumer cannot be made. */
  static async open(
    nc: NatsConnection,
    jsm: JetStreamManager,
    log: LogSpec,
    fromSeq: number,
  ): Promise<PartitionConsumer> {
    const c = new PartitionConsumer(nc, jsm, log, fromSeq);
    const first = c.make();
    // A reconnect meanwhile asks for another consumer after this one, not one beside it.
    c.remaking = first.then(
      () => c.madeAgain(),
      () => undefined,
    );
    try {
      await first;
    } catch (e) {
      c.stopped = true;
      c.close();
      throw e;
    }
    return c;
  }

  next(): LogRecord | undefined {
    const r = this.queue.take();
    if (r !== undefined) {
      this.refill();
      return r;
    }
    if (this.failure !== undefined) throw this.failure;
    return undefined;
  }

  wait(): Promise<void> {
    if (this.queue.size > 0 || this.stopped) return Promise.resolve();
    return new Promise<void>((resolve) => (this.wake = resolve));
  }

  get ended(): boolean {
    return this.stopped && this.queue.size === 0;
  }

  /** Records received and not yet taken. */
  get queued(): number {
    return this.queue.size;
  }

  /**
   * Whether the partition is caught up with its log: every record the server holds for it has
   * been delivered and taken, and the last one taken is `lastHandled`. Asked of the server
   * (consumer info), since the last delivery's pending count is as old as the delivery: a
   * consumer that is stalled (a slow server, a remake, a full window) looks idle without being so.
   */
  async caughtUp(lastHandled: number): Promise<boolean> {
    const local = (): boolean =>
      !this.stopped &&
      this.remaking === undefined &&
      !this.disconnected &&
      this.name !== '' &&
      this.queue.size === 0 &&
      this.nextSeq <= lastHandled + 1;
    if (!local()) return false;
    const name = this.name;
    const delivered = this.lastDelivery;
    const info = await this.jsm.consumers.info(this.log.stream, name);
    // Nothing left for the consumer, and nothing sent that has not arrived (the server's
    // delivery count is ours: its stream sequence runs on past records of other partitions).
    // Anything that happened meanwhile (a delivery, a remake) makes the answer stale: no.
    return (
      local() &&
      this.name === name &&
      this.lastDelivery === delivered &&
      info.num_pending === 0 &&
      info.delivered.consumer_seq === delivered
    );
  }

  async stop(): Promise<void> {
    // The record being handled is the last: the rest were never taken, and the next owner (or
    // this one, after a restart) reads them again from the checkpoint's offset.
    this.stopped = true;
    this.queue.clear();
    const name = this.name;
    this.close();
    this.signal();
    // A consumer still being made removes itself once made (see `make`). Without a server to
    // answer, the delete could only time out: the server drops the consumer after
    // INACTIVE_THRESHOLD_MS anyway.
    if (name !== '' && !this.disconnected) await this.drop(name, STOP_DELETE_MS);
  }

  private close(): void {
    clearInterval(this.timer);
    this.unwatch();
    this.sub?.unsubscribe();
    this.sub = undefined;
    if (this.retry !== undefined) {
      clearTimeout(this.retry.timer);
      this.retry.done();
      this.retry = undefined;
    }
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
    const name = this.name;
    this.close();
    this.signal();
    if (name !== '') void this.drop(name, STOP_DELETE_MS);
  }

  /** Deletes a consumer, giving up after `ms`; never rejects. */
  private async drop(name: string, ms: number): Promise<void> {
    if (this.nc.isClosed()) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.jsm.consumers.delete(this.log.stream, name).catch(() => undefined),
      new Promise((r) => (timer = setTimeout(r, ms))),
    ]);
    clearTimeout(timer);
  }

  private onConnection(e: ConnectionEvent): void {
    if (e === 'disconnect') this.disconnected = true;
    else if (e === 'closed') this.fail(this.closed());
    else {
      this.disconnected = false;
      this.resume();
    }
  }

  /**
   * After a reconnect: a server that restarted has lost the consumer (it lives in memory), one
   * that did not still has it, and making every partition's consumer again would cost it a scan
   * of the stream each. So ask first, as the client does: if it is there, pulls start over (those
   * waiting may have gone with the old connection, and a record lost on the way shows as a
   * skipped delivery); if not, or if the answer fails, it is made again.
   */
  private resume(): void {
    const name = this.name;
    if (this.stopped) return;
    if (name === '' || this.remaking !== undefined) return this.remake();
    this.remaking = this.jsm.consumers
      .info(this.log.stream, name)
      .then(
        () => {
          if (this.stopped || this.name !== name) return;
          this.asked = 0;
          this.missed = 0;
          this.pull();
        },
        () => {
          this.again = true;
        },
      )
      .then(() => this.madeAgain());
  }

  /**
   * The server sends a heartbeat while a pull waits with nothing to deliver. Checks are counted,
   * not timed, so that one long stall of this thread is one missed check, not several.
   */
  private checkHeartbeats(): void {
    if (this.stopped || this.remaking !== undefined || this.disconnected) return;
    // With the window full of records not yet taken nothing is asked for, and the server, with no
    // pull waiting, sends nothing: that silence says nothing about the consumer.
    if (this.asked === 0) this.missed = 0;
    else if (++this.missed >= MISSED_HEARTBEATS) this.remake();
  }

  /** Makes a consumer from `nextSeq` on a new inbox, so nothing the old one sent is read. */
  private async make(): Promise<void> {
    // Short: the name is in the reply subject of every record, which the client parses byte by
    // byte (15 bytes fewer than with a nuid). 72 random bits keep names of processes apart.
    const name = `${this.log.namePrefix}_${randomBytes(9).toString('base64url')}`;
    const config: Partial<ConsumerConfig> = {
      name,
      filter_subject: this.log.filter,
      ack_policy: AckPolicy.None,
      max_deliver: 1,
      mem_storage: true,
      num_replicas: 1,
      inactive_threshold: nanos(INACTIVE_THRESHOLD_MS),
      ...(this.nextSeq > 1
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: this.nextSeq }
        : { deliver_policy: DeliverPolicy.All }),
    };
    try {
      await this.jsm.consumers.add(this.log.stream, config);
    } catch (e) {
      // The server may have made it and its answer been lost (a reconnect): remove it.
      void this.drop(name, STOP_DELETE_MS);
      throw e;
    }
    if (this.stopped) {
      await this.drop(name, STOP_DELETE_MS);
      return;
    }
    this.name = name;
    this.lastDelivery = 0;
    this.asked = 0;
    this.missed = 0;
    const sub = this.nc.subscribe(`_INBOX.${nuid.next()}`, {
      callback: (err, msg) => {
        if (sub !== this.sub) return;
        if (err)
          this.fail(
            this.nc.isClosed()
              ? this.closed(err)
              : new ServiceError(
                  ServiceErrorCode.Nats,
                  `${this.log.label}: its subscription failed: ${err.message}`,
                  { retryable: false, cause: err },
                ),
          );
        else this.onMessage(msg);
      },
    });
    this.sub = sub;
    this.pull();
  }

  /** Drops the consumer and makes another from the next record wanted, retrying until it can. */
  private remake(): void {
    if (this.stopped) return;
    if (this.remaking !== undefined) {
      this.again = true;
      return;
    }
    const old = this.name;
    this.name = '';
    this.sub?.unsubscribe();
    this.sub = undefined;
    if (old !== '') void this.drop(old, STOP_DELETE_MS);
    this.remaking = (async () => {
      for (let attempt = 0; !this.stopped; attempt++) {
        try {
          await this.make();
          return;
        } catch {
          await this.pause(backoffMs(attempt, RETRY_MIN_MS, RETRY_MAX_MS));
        }
      }
    })().then(() => this.madeAgain());
  }

  /** A make has ended: another one if something asked for it meanwhile. */
  private madeAgain(): void {
    this.remaking = undefined;
    if (this.again) {
      this.again = false;
      this.remake();
    }
  }

  /** Waits before the next try; `close` ends the wait. */
  private pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        this.retry = undefined;
        resolve();
      };
      this.retry = { timer: setTimeout(done, ms), done };
    });
  }

  /** Asks for more once what is on its way or waiting falls to PULL_REFILL_SHARE of the window. */
  private refill(): void {
    if (this.asked + this.queued <= this.batch * PULL_REFILL_SHARE) this.pull();
  }

  /** Asks for what the window has room for: `batch` less what is on its way or waiting. */
  private pull(): void {
    const batch = this.batch - this.asked - this.queued;
    if (batch <= 0 || this.sub === undefined) return;
    // The connection closes under a worker that is stopping: publish would throw (into `next`).
    if (this.nc.isClosed()) return this.fail(this.closed());
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
    this.missed = 0;
    const reply = msg.reply ?? '';
    if (reply === '') return this.onStatus(msg);
    const info = this.info;
    if (!parseAckReply(reply, info))
      return this.fail(
        new ServiceError(
          ServiceErrorCode.Nats,
          `${this.log.label}: a record came with a reply subject Vigil cannot read (${reply}); is the server a NATS version Vigil supports (2.9+)?`,
          { retryable: false },
        ),
      );
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
    // Asked for → waiting: the window is as full as before, nothing to ask for until one is taken.
    this.asked--;
    this.signal();
  }

  /** A status message on the inbox (see {@link pullStatus}). */
  private onStatus(msg: Msg): void {
    const h = msg.headers;
    if (h === undefined) return;
    const status = pullStatus(h.code, h.description, h.get('Nats-Pending-Messages'), this.batch);
    switch (status.kind) {
      case 'heartbeat':
        return;
      case 'remake':
        return this.remake();
      case 'refused':
        return this.fail(pullRefused(this.log, status.description, this.batch, PULL_EXPIRES_MS));
      case 'capped':
        this.batch = status.batch;
        this.asked = 0;
        return this.pull();
      case 'ended':
        this.asked = Math.max(0, this.asked - status.released);
        return this.refill();
    }
  }

  private closed(cause?: Error): ServiceError {
    return new ServiceError(
      ServiceErrorCode.Nats,
      `${this.log.label}: the NATS connection closed; its log stops here`,
      { retryable: true, cause },
    );
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
  log: LogSpec = eventLog(partition),
): Promise<EventSource> {
  return PartitionConsumer.open(nats.nc, nats.jsm, log, fromSeq);
}

/** Which log a consumer reads: a stream, the one filter, and how names and errors name it. */
export interface LogSpec {
  readonly stream: string;
  readonly filter: string;
  /** The start of its consumers' names (short: the name is in every record's reply subject). */
  readonly namePrefix: string;
  /** How errors name it. */
  readonly label: string;
}

/** Partition `p` of the event log: events, markers and ticks in one order. */
export const eventLog = (p: number): LogSpec => ({
  stream: Streams.events,
  filter: partitionFilter(p),
  namePrefix: `v${p}`,
  label: `partition ${p}`,
});

/** Key space `space`'s downstream partition `p` of the re-keying hop. */
export const rekeyLog = (space: string, p: number): LogSpec => ({
  stream: Streams.rekey,
  filter: rekeySubject(space, p),
  namePrefix: `r${p}`,
  label: `partition ${p} of key space ${space}`,
});
