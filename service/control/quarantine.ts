import type { JetStreamClient } from '@nats-io/jetstream';
import type { WorkerMetrics } from '../metrics/metrics.js';
import { CONTROL_SUBJECT } from '../../protocol/index.js';

const encoder = new TextEncoder();

/**
 * Counts a worker's rule evaluation errors and, after `after` of them for one version of a rule,
 * pauses the rule by publishing a `pause-rule` message to CONTROL. The pause goes through the
 * control log like any change, so every partition of every process applies it at its marker and
 * none judges with a rule the others have dropped. Its message id names the rule, the version and
 * the control sequence in force, so the same quarantine from several workers or processes is one
 * message (CONTROL dedupe).
 */
export class RuleQuarantine {
  private readonly errors = new Map<string, number>();
  private readonly sent = new Set<string>();

  constructor(
    /** Only publishing is used: a unit test hands a recorder. */
    private readonly js: Pick<JetStreamClient, 'publish'>,
    private readonly after: number,
    private readonly metrics: WorkerMetrics,
    private readonly log: (level: 'warn' | 'error', message: string) => void,
  ) {}

  /** One evaluation of `ruleId` (at `version`, under `controlSeq`) threw `message`. */
  readonly onRuleError = (
    ruleId: string,
    version: number,
    controlSeq: number,
    message: string,
  ): void => {
    const k = `${ruleId}@${version}`;
    const n = (this.errors.get(k) ?? 0) + 1;
    this.errors.set(k, n);
    const id = `quarantine-${ruleId}-${version}-${controlSeq}`;
    if (n < this.after || this.sent.has(id)) return;
    this.sent.add(id);
    this.errors.delete(k);
    this.metrics.quarantines.inc({ rule: ruleId });
    this.log('warn', `rule ${ruleId} failed on ${n} events; pausing it through CONTROL`);
    const pause = {
      op: 'pause-rule',
      id: ruleId,
      meta: { actor: 'vigil', reason: `quarantined after ${n} errors; last: ${message}` },
    };
    void this.js
      .publish(CONTROL_SUBJECT, encoder.encode(JSON.stringify(pause)), { msgID: id })
      .catch((err: Error) =>
        this.log('error', `could not publish the quarantine of ${ruleId}: ${err.message}`),
      );
  };
}
