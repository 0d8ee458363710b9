import { JetStreamApiCodes, JetStreamApiError, type JetStreamClient } from '@nats-io/jetstream';
import {
  validateControl,
  type ChangeMeta,
  type ControlMessage,
  type RuleLimits,
  type RuleSet,
} from '../rules/index.js';
import { CONTROL_SUBJECT } from '../protocol/index.js';
import type { ChangeRecord, ControlLog } from './control-log.js';
import { ApiError, ApiErrorCode, invalid } from './errors.js';

/** How often a change is tried again when another change got into `CONTROL` first. */
const MAX_ATTEMPTS = 8;

const encoder = new TextEncoder();

/**
 * Publishes control messages as compare-and-set on `CONTROL`: each is built and validated against
 * the fold at sequence n and published with `Nats-Expected-Last-Sequence: n`, so the shards apply
 * it to exactly the rule set it was checked against. When another writer got in first, JetStream
 * refuses it; the fold catches up and the change is built, checked (a stale expected version then
 * fails with 409) and tried again. The answer waits until the fold has applied the new sequence.
 */
export class ControlWriter {
  private tail: Promise<unknown> = Promise.resolve();
  /** Publishes JetStream refused because another change got into `CONTROL` first. */
  conflicts = 0;

  constructor(
    private readonly js: JetStreamClient,
    private readonly log: ControlLog,
    private readonly limits: RuleLimits,
    private readonly timeoutMs: number,
    /** The NATS server's `max_payload`: a larger message would be refused by the server itself. */
    private readonly maxPayload: number = Infinity,
  ) {}

  /**
   * Builds a message from the current rule set (`build` may throw an ApiError: 404, 409), checks
   * it, publishes it with `meta`, and returns its audit record once folded.
   */
  commit(
    build: (rs: RuleSet) => ControlMessage,
    meta: ChangeMeta,
    what = 'the change',
  ): Promise<ChangeRecord> {
    // One change at a time from this process: concurrent requests would only refuse each other.
    const run = this.tail.then(() => this.attempt(build, meta, what));
    this.tail = run.catch(() => undefined);
    return run;
  }

  private async attempt(
    build: (rs: RuleSet) => ControlMessage,
    meta: ChangeMeta,
    what: string,
  ): Promise<ChangeRecord> {
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const rs = this.log.ruleSet;
      const message = { ...build(rs), meta };
      const problems = validateControl(rs, message, this.limits);
      if (problems.length > 0) throw invalid(what, problems);
      const data = encoder.encode(JSON.stringify(message));
      if (data.byteLength > this.limits.maxControlBytes)
        throw new ApiError(
          ApiErrorCode.TooLarge,
          `${what} is ${data.byteLength} bytes as a control message, over the limit of ${this.limits.maxControlBytes}`,
          { details: { limit: this.limits.maxControlBytes, size: data.byteLength } },
        );
      // Headers travel in the same payload; a kilobyte is more than ours take.
      if (data.byteLength + 1024 > this.maxPayload)
        throw new ApiError(
          ApiErrorCode.TooLarge,
          `${what} is ${data.byteLength} bytes as a control message, more than the NATS server takes (its max_payload is ${this.maxPayload} bytes); raise max_payload in nats-server's configuration (config/nats.conf sets 9MB)`,
          { details: { limit: this.maxPayload - 1024, size: data.byteLength } },
        );
      let seq: number;
      try {
        seq = (
          await this.js.publish(CONTROL_SUBJECT, data, {
            expect: { lastSequence: rs.controlSeq },
            timeout: this.timeoutMs,
          })
        ).seq;
      } catch (e) {
        if (
          e instanceof JetStreamApiError &&
          e.code === JetStreamApiCodes.StreamWrongLastSequence
        ) {
          this.conflicts++;
          await this.catchUp();
          continue;
        }
        throw new ApiError(ApiErrorCode.Unavailable, `could not publish to ${CONTROL_SUBJECT}`, {
          cause: e,
        });
      }
      try {
        await this.log.waitFor(seq, this.timeoutMs);
      } catch (e) {
        throw new ApiError(
          ApiErrorCode.Timeout,
          `the change is stored at control sequence ${seq} but was not applied here within ${this.timeoutMs} ms`,
          { details: { seq }, cause: e },
        );
      }
      const record = this.log.record(seq);
      if (record === undefined)
        throw new ApiError(
          ApiErrorCode.Internal,
          `control sequence ${seq} is missing from the fold`,
        );
      if (!record.ok) throw invalid(what, record.problems ?? []);
      return record;
    }
    throw new ApiError(
      ApiErrorCode.Conflict,
      `${what} lost the race for CONTROL ${MAX_ATTEMPTS} times; try again`,
      { retryable: true },
    );
  }

  private async catchUp(): Promise<void> {
    const head = await this.log.streamHead();
    await this.log.waitFor(head, this.timeoutMs);
  }
}
