import { headers } from '@nats-io/transport-node';
import type { Alert } from '../../rules/index.js';
import type { Publisher } from './publisher.js';
import { alertSubject, DLQ_HEADERS, dlqSubject } from '../../protocol/index.js';

/**
 * Where alerts go. The production sink publishes to `ALERTS`, deduplicated by alert id.
 * `publish` hands the alert over: undefined when the sink can take more at once, else a promise
 * to wait for before the next (backpressure).
 */
export interface AlertSink {
  publish(alert: Alert): Promise<void> | undefined;
}

/** A message that could not be used, with the reason. */
export interface DeadLetter {
  /** Reason token (`not-json`, `late`, `rule-error`, `forged-marker`, `invalid-control`, …). */
  readonly reason: string;
  /** The original payload. */
  readonly data: Uint8Array;
  /** One line for people: what was wrong and, where it helps, how to fix it. */
  readonly message: string;
  /** Where it came from. */
  readonly source?: { readonly stream: string; readonly subject: string; readonly seq: number };
  readonly ruleId?: string;
  /** Stable id, so a replay re-publishes the same dead letter and dedupe absorbs it. */
  readonly id: string;
}

/** Where dead letters go. The production sink publishes to `DLQ` (`vigil.dlq.<reason>`); `publish` as {@link AlertSink}'s. */
export interface DeadLetterSink {
  publish(letter: DeadLetter): Promise<void> | undefined;
}

const encoder = new TextEncoder();

/** Alerts to `alerts.<severity>.<ruleId>` with `Nats-Msg-Id` = alert id. */
export function natsAlertSink(publisher: Publisher): AlertSink {
  return {
    publish: (alert) =>
      publisher.publish(
        alertSubject(alert.severity, alert.ruleId),
        encoder.encode(JSON.stringify(alert)),
        { msgID: alert.id },
      ),
  };
}

/** A header value on one line, bounded. */
function headerValue(s: string): string {
  return s.replace(/[\r\n]+/g, ' ').slice(0, 2000);
}

/**
 * Dead letters to `vigil.dlq.<reason>`: the original payload, with the reason and source in
 * headers. `onStored` hears of each one the stream stored: a dead letter every worker reports
 * (a rejected control message) or one a replay reports again has one id, and is stored once.
 */
export function natsDeadLetterSink(
  publisher: Publisher,
  onStored: (reason: string) => void = () => {},
): DeadLetterSink {
  return {
    publish(letter) {
      const h = headers();
      h.set(DLQ_HEADERS.reason, letter.reason);
      h.set(DLQ_HEADERS.error, headerValue(letter.message));
      if (letter.source) {
        h.set(DLQ_HEADERS.sourceStream, letter.source.stream);
        h.set(DLQ_HEADERS.sourceSubject, letter.source.subject);
        h.set(DLQ_HEADERS.sourceSeq, String(letter.source.seq));
      }
      if (letter.ruleId) h.set(DLQ_HEADERS.rule, letter.ruleId);
      return publisher.publish(
        dlqSubject(letter.reason),
        letter.data,
        { msgID: letter.id, headers: h },
        () => onStored(letter.reason),
      );
    },
  };
}
