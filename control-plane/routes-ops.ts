import type { Router } from 'express';
import { explainRule, parseEvent, SourceHop } from '../rules/index.js';
import { partitionOf } from '../protocol/index.js';
import { changeView, type ApiContext } from './context.js';
import { invalid, notFound } from './errors.js';
import { queryInt, route } from './http-support.js';
import { byPartition, histogramQuantile, sumMetric, type MetricJSON } from './metrics-view.js';

async function metricsOf(ctx: ApiContext): Promise<MetricJSON[]> {
  const pool = ctx.pool();
  if (pool === undefined) return [];
  return (await (await pool.metrics()).getMetricsAsJSON()) as unknown as MetricJSON[];
}

/** Explain, status, per-rule stats and the audit log of `CONTROL`. */
export function mountOpsRoutes(router: Router, ctx: ApiContext): void {
  route(router, 'post', '/rules/:id/explain', 'read', (req, res) => {
    const id = req.params.id as string;
    const rs = ctx.log().ruleSet;
    const rule = rs.rules.get(id);
    if (rule === undefined) throw notFound('rule', id);
    const body = (req.body ?? {}) as { event?: unknown; key?: unknown };
    if (body.key !== undefined && typeof body.key !== 'string')
      throw invalid('the request', [
        { pointer: '/key', message: 'key must be a string (the partition key)' },
      ]);
    const parsed = parseEvent(body.event, Date.now(), ctx.options.limits);
    if (!parsed.ok)
      throw invalid('the event', [
        { pointer: '/event', message: `${parsed.message} (${parsed.reason})` },
      ]);
    const o = ctx.options;
    const hop =
      o.rekey === undefined
        ? undefined
        : new SourceHop({ ...o.rekey, partitions: o.partitions, partitionOf });
    res.json(explainRule(rule, parsed.event, rs.models, body.key ?? '', hop));
  });

  route(router, 'get', '/status', 'read', async (_req, res) => {
    const log = ctx.log();
    const pool = ctx.pool();
    const metrics = await metricsOf(ctx);
    const applied = byPartition(metrics, 'vigil_control_seq_applied');
    const offset = byPartition(metrics, 'vigil_partition_offset');
    const lag = byPartition(metrics, 'vigil_consumer_lag');
    const watermarkLag = byPartition(metrics, 'vigil_watermark_lag_seconds');
    const checkpointAt = byPartition(metrics, 'vigil_checkpoint_last_success_timestamp_seconds');
    const checkpointOffset = byPartition(metrics, 'vigil_checkpoint_offset');
    const latest = log.latestAccepted;
    const workers = pool?.status() ?? [];
    const instance = ctx.options.instanceId;
    const held = workers
      .flatMap((w) => w.partitions.map((p) => ({ p, w })))
      .sort((a, b) => a.p - b.p);
    const partitions = held.map(({ p, w }) => {
      const at = checkpointAt.get(p);
      return {
        partition: p,
        owner: instance ? `${instance} worker ${w.worker}` : `worker ${w.worker}`,
        ready: w.ready,
        controlSeqApplied: applied.get(p) ?? 0,
        onLatest: (applied.get(p) ?? 0) >= latest,
        offset: offset.get(p) ?? 0,
        lag: lag.get(p) ?? 0,
        watermarkLagSeconds: watermarkLag.get(p) ?? null,
        lastCheckpoint: at === undefined || at === 0 ? null : new Date(at * 1000).toISOString(),
        checkpointOffset: checkpointOffset.get(p) ?? null,
      };
    });
    const here = new Set(held.map((h) => h.p));
    res.json({
      ready: pool?.ready ?? false,
      instance,
      // With several processes sharing the partitions, each reports those it holds.
      notHeldHere: Array.from({ length: ctx.options.partitions }, (_, p) => p).filter(
        (p) => !here.has(p),
      ),
      controlSeq: log.seq,
      latestAcceptedControlSeq: latest,
      allOnLatest: partitions.length > 0 && partitions.every((p) => p.onLatest),
      activationSeconds: {
        count: sumMetric(metrics, 'vigil_activation_seconds', {}, 'vigil_activation_seconds_count'),
        p50: histogramQuantile(metrics, 'vigil_activation_seconds', 0.5),
        p99: histogramQuantile(metrics, 'vigil_activation_seconds', 0.99),
      },
      // The last changes as the workers reported applying them: on how many partitions held
      // here, and the slowest one's time from CONTROL (ms).
      recentActivations: pool?.activations.activations().slice(-20) ?? [],
      workers,
      partitions,
    });
  });

  route(router, 'get', '/rules/:id/stats', 'read', async (req, res) => {
    const id = req.params.id as string;
    const log = ctx.log();
    const history = log.ruleHistory(id);
    if (history.length === 0) throw notFound('rule', id);
    const metrics = await metricsOf(ctx);
    const labels = { rule: id };
    // The last alert is the newest message on any of the subjects the rule's versions used.
    const severities = new Set(
      history.flatMap((h) => (h.rule === undefined ? [] : [h.rule.alert?.severity ?? 'medium'])),
    );
    let last: { seq: number; data: unknown; time: string } | undefined;
    for (const s of severities) {
      const m = await ctx
        .jsm()
        .streams.getMessage('ALERTS', { last_by_subj: `alerts.${s}.${id}` })
        .catch(() => null);
      if (m !== null && (last === undefined || m.seq > last.seq))
        last = { seq: m.seq, data: m.json(), time: m.time.toISOString() };
    }
    const alert = last?.data as
      { id?: string; ts?: number; key?: string; ruleVersion?: number } | undefined;
    res.json({
      id,
      // Counters of this process since it started (the workers' merged metrics).
      matches: sumMetric(metrics, 'vigil_rule_matches_total', labels),
      alerts: sumMetric(metrics, 'vigil_alerts_total', labels),
      errors: sumMetric(metrics, 'vigil_rule_errors_total', labels),
      quarantines: sumMetric(metrics, 'vigil_quarantines_total', labels),
      overflows: sumMetric(metrics, 'vigil_state_overflow_total', labels),
      // Events of its types that lack its key field: none of them meets the rule.
      keyMissing: sumMetric(metrics, 'vigil_rule_key_missing_total', labels),
      lastFired:
        last === undefined
          ? null
          : {
              alertId: alert?.id,
              eventTime: typeof alert?.ts === 'number' ? new Date(alert.ts).toISOString() : null,
              publishedAt: last.time,
              key: alert?.key,
              ruleVersion: alert?.ruleVersion,
              alertsSeq: last.seq,
            },
    });
  });

  route(router, 'get', '/control', 'read', (req, res) => {
    const after = queryInt(req.query.after, 'after', 0, Number.MAX_SAFE_INTEGER, 0);
    const limit = queryInt(req.query.limit, 'limit', 0, 1000, 100);
    res.json({
      controlSeq: ctx.log().seq,
      changes: ctx.log().recordsAfter(after, limit).map(changeView),
    });
  });
}
