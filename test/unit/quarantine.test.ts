import { describe, expect, it } from 'vitest';
import type { JetStreamClient } from '@nats-io/jetstream';
import { CONTROL_SUBJECT } from '../../protocol/index.js';
import { RuleQuarantine } from '../../service/control/quarantine.js';
import { WorkerMetrics } from '../../service/metrics/metrics.js';

/** What the quarantine published to CONTROL. */
interface Published {
  readonly subject: string;
  readonly message: { op: string; id: string; meta: { actor: string; reason: string } };
  readonly msgID: string | undefined;
}

function quarantine(after: number, fail = false) {
  const published: Published[] = [];
  const logs: string[] = [];
  const js: Pick<JetStreamClient, 'publish'> = {
    publish: (subject, data, options) => {
      published.push({
        subject,
        message: JSON.parse(new TextDecoder().decode(data as Uint8Array)) as Published['message'],
        msgID: options?.msgID,
      });
      return fail
        ? Promise.reject(new Error('no responders'))
        : Promise.resolve({ stream: 'CONTROL', seq: published.length, duplicate: false });
    },
  };
  const metrics = new WorkerMetrics();
  const q = new RuleQuarantine(js, after, metrics, (level, m) => void logs.push(`${level} ${m}`));
  return { q, published, logs, metrics };
}

describe('RuleQuarantine', () => {
  it('pauses a rule through CONTROL after N errors of one version, once', async () => {
    const { q, published, logs, metrics } = quarantine(3);
    q.onRuleError('r1', 4, 10, 'boom 1');
    q.onRuleError('r1', 4, 10, 'boom 2');
    expect(published).toEqual([]);
    q.onRuleError('r1', 4, 10, 'boom 3');
    expect(published).toEqual([
      {
        subject: CONTROL_SUBJECT,
        message: {
          op: 'pause-rule',
          id: 'r1',
          meta: { actor: 'vigil', reason: 'quarantined after 3 errors; last: boom 3' },
        },
        msgID: 'quarantine-r1-4-10',
      },
    ]);
    expect(logs).toEqual(['warn rule r1 failed on 3 events; pausing it through CONTROL']);
    expect((await metrics.quarantines.get()).values).toEqual([
      expect.objectContaining({ labels: { rule: 'r1' }, value: 1 }),
    ]);
    // Further errors under the same control sequence send nothing more.
    for (let i = 0; i < 10; i++) q.onRuleError('r1', 4, 10, 'again');
    expect(published).toHaveLength(1);
  });

  it('counts per rule and version: errors of other rules or versions do not add up', () => {
    const { q, published } = quarantine(2);
    q.onRuleError('r1', 4, 10, 'x');
    q.onRuleError('r1', 5, 11, 'x');
    q.onRuleError('r2', 4, 11, 'x');
    expect(published).toEqual([]);
    q.onRuleError('r1', 5, 12, 'x');
    expect(published.map((p) => p.msgID)).toEqual(['quarantine-r1-5-12']);
  });

  it('after a pause under one control sequence, N more errors under another send a new one', () => {
    // (The rule was resumed in between: the same version errs again under a later sequence.)
    const { q, published } = quarantine(2);
    q.onRuleError('r1', 4, 10, 'x');
    q.onRuleError('r1', 4, 10, 'x');
    q.onRuleError('r1', 4, 12, 'x');
    expect(published).toHaveLength(1);
    q.onRuleError('r1', 4, 12, 'x');
    expect(published.map((p) => p.msgID)).toEqual(['quarantine-r1-4-10', 'quarantine-r1-4-12']);
  });

  it('logs a publish that fails', async () => {
    const { q, published, logs } = quarantine(1, true);
    q.onRuleError('r1', 1, 2, 'x');
    expect(published).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 0));
    expect(logs).toContain('error could not publish the quarantine of r1: no responders');
  });
});
