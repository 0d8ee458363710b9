import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALERTS_BY_RULE_EXPR, THROUGHPUT_EXPR } from '../../dashboards/grafana/dashboards.js';
import { type RunningService } from '../../service/index.js';
import { publishDemoRules, startDemoProducer } from '../../scripts/demo.js';
import {
  exportedNames,
  metricNames,
  promtool,
  shippedExpressions,
  startPrometheus,
  withoutGrafanaVariables,
  type PrometheusHandle,
} from './prometheus-support.js';
import { eventually, startTestServers, startTestService, type TestServers } from './servers.js';

type Vector = {
  resultType: string;
  result: { metric: Record<string, string>; value: [number, string] }[];
};

/**
 * A real Prometheus scrapes a running service (real nats-server and redis-server) while the demo
 * producer publishes events, with the shipped scrape config and alerting rules. The dashboards'
 * queries are asked of it.
 */
describe('Prometheus scraping a running service', () => {
  const partitions = 4;
  let servers: TestServers;
  let service: RunningService;
  let prometheus: PrometheusHandle;
  let producer: { stop(): Promise<void> };

  beforeAll(async () => {
    servers = await startTestServers({ partitions, redis: true });
    // A cap of one rule label, so the overflow into rule="_other" shows with the demo rules.
    ({ service } = await startTestService(servers, { partitions, metricsMaxRuleLabels: 1 }));
    await publishDemoRules(servers.nc);
    producer = startDemoProducer(servers.nc);
    // One bad event, so the dead-letter counter has a series too.
    await servers.js.publish('events.c-1', 'not json');
    prometheus = await startPrometheus({
      dir: join(servers.dir, 'prometheus'),
      target: new URL(service.url).host,
    });
  });

  afterAll(async () => {
    await prometheus?.stop();
    await producer?.stop();
    await service?.stop();
    await servers?.stop();
  });

  const query = (expr: string): Promise<Vector> =>
    prometheus.api<Vector>('query', { query: withoutGrafanaVariables(expr, '10s') });

  it('the throughput and per-rule alert queries of the dashboards return data', async () => {
    await eventually(
      async () => {
        const v = await query(THROUGHPUT_EXPR);
        return v.result.some((s) => Number(s.value[1]) > 0);
      },
      60_000,
      'the throughput query to show events',
    );
    await eventually(
      async () => {
        const v = await query(ALERTS_BY_RULE_EXPR);
        return v.result.some((s) => s.metric.rule !== undefined && Number(s.value[1]) > 0);
      },
      60_000,
      'the per-rule alert query to show alerts',
    );
    await eventually(
      async () => {
        const v = await query('sum(vigil_alert_latency_seconds_count)');
        return v.result.some((s) => Number(s.value[1]) > 0);
      },
      20_000,
      'the alert latency histogram to count the alerts',
    );
    const dlq = await query('sum by (reason) (vigil_dlq_total)');
    expect(dlq.result.map((s) => s.metric.reason)).toContain('not-json');
  });

  it('the process-wide metrics: CONTROL head, keyed state from Redis, rule label cap', async () => {
    await eventually(
      async () => {
        const v = await query('sum by (rule) (vigil_alerts_total)');
        return v.result.some((s) => s.metric.rule === '_other');
      },
      30_000,
      'alerts of a second rule to be counted as rule="_other"',
    );
    const rules = (await query('sum by (rule) (vigil_alerts_total)')).result.map(
      (s) => s.metric.rule,
    );
    expect(rules).toHaveLength(2);
    const head = await query('vigil_control_seq_head');
    const applied = await query('min(vigil_control_seq_applied)');
    // The demo rules are all valid: every partition has the head in force.
    expect(Number(head.result[0]?.value[1])).toBeGreaterThan(0);
    expect(applied.result[0]?.value[1]).toBe(head.result[0]?.value[1]);
    await eventually(
      async () => {
        const v = await query('sum(vigil_state_keys) > 0 and sum(vigil_state_bytes) > 0');
        return v.result.length > 0;
      },
      30_000,
      'checkpointed keyed state to show in vigil_state_keys and vigil_state_bytes',
    );
  });

  it('the target is up and every alerting rule evaluates without error', async () => {
    const targets = await prometheus.api<{
      activeTargets: { health: string; labels: Record<string, string> }[];
    }>('targets');
    expect(targets.activeTargets).toEqual([
      expect.objectContaining({ health: 'up', labels: expect.objectContaining({ job: 'vigil' }) }),
    ]);
    await eventually(
      async () => {
        const { groups } = await prometheus.api<{
          groups: { rules: { name: string; health: string; lastError?: string }[] }[];
        }>('rules');
        const rules = groups.flatMap((g) => g.rules);
        return rules.length > 0 && rules.every((r) => r.health === 'ok');
      },
      20_000,
      'every rule to have been evaluated with health ok',
    );
    // Healthy and busy: none of the alerts fires. (Some may be pending: with seconds of history a
    // busy partition's offset has not changed yet in Prometheus' eyes; their `for` covers that.)
    const { alerts } = await prometheus.api<{
      alerts: { state: string; labels: { alertname: string } }[];
    }>('alerts');
    expect(alerts.filter((a) => a.state === 'firing').map((a) => a.labels.alertname)).toEqual([]);
  });

  it('every dashboard and rule expression is accepted by the server', async () => {
    for (const { where, expr } of shippedExpressions('10s'))
      await expect(
        prometheus.api('query', { query: expr }).then(() => 'ok'),
        where,
      ).resolves.toBe('ok');
  });

  it('the expressions name only metrics the service exports, and its /metrics lints clean', async () => {
    const exposition = await (await fetch(`${service.url}/metrics`)).text();
    const exported = exportedNames(exposition);
    // `up` is written by Prometheus itself for every target.
    exported.add('up');
    for (const { where, expr } of shippedExpressions())
      for (const name of metricNames(expr)) expect(exported, `${where}: ${name}`).toContain(name);
    // docs/operations.md describes every metric of the service.
    const ops = readFileSync('docs/operations.md', 'utf8');
    for (const m of exposition.matchAll(/^# TYPE (vigil_\S+) /gm))
      expect(ops, `docs/operations.md does not describe ${m[1]}`).toContain(`\`${m[1]}\``);
    // Ours only: prom-client's own nodejs_active_*_total gauges break the _total convention.
    const vigilOnly = exposition
      .split('\n')
      .filter((l) => /^(# (HELP|TYPE) )?vigil_/.test(l))
      .join('\n');
    const lint = promtool(['check', 'metrics'], `${vigilOnly}\n`);
    expect(lint.status, lint.output).toBe(0);
  });
});
