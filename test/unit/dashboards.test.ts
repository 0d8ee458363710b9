import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { DASHBOARDS, DATASOURCE_UID } from '../../dashboards/grafana/dashboards.js';
import {
  ALERT_RULES,
  ALERT_TESTS,
  alertRules,
  metricNames,
  PROMETHEUS_CONFIG,
  promtool,
  promtoolAsync,
  shippedExpressions,
} from '../integration/prometheus-support.js';

const tmp = mkdtempSync(join(tmpdir(), 'vigil-dashboards-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('Prometheus configuration and alerting rules', () => {
  it('promtool check config passes (and finds the rule files)', () => {
    const r = promtool(['check', 'config', PROMETHEUS_CONFIG]);
    expect(r.output).toContain('SUCCESS: 1 rule files found');
    expect(r.status, r.output).toBe(0);
  });

  it('promtool check rules passes', () => {
    const r = promtool(['check', 'rules', ALERT_RULES]);
    expect(r.status, r.output).toBe(0);
  });

  it('promtool test rules passes', () => {
    const r = promtool(['test', 'rules', ALERT_TESTS]);
    expect(r.status, r.output).toBe(0);
  });

  it('every alerting rule is tested: without it, promtool test rules fails', async () => {
    const rules = alertRules();
    expect(rules.length).toBeGreaterThanOrEqual(6);
    const doc = parse(readFileSync(ALERT_RULES, 'utf8')) as {
      groups: { rules: { alert: string }[] }[];
    };
    const tests = parse(readFileSync(ALERT_TESTS, 'utf8')) as { rule_files: string[] };
    const results = await Promise.all(
      rules.map(({ alert }) => {
        const dir = mkdtempSync(join(tmp, 'without-'));
        const without = {
          ...doc,
          groups: doc.groups.map((g) => ({
            ...g,
            rules: g.rules.filter((r) => r.alert !== alert),
          })),
        };
        writeFileSync(join(dir, 'rules.yml'), stringify(without));
        writeFileSync(join(dir, 'tests.yml'), stringify({ ...tests, rule_files: ['rules.yml'] }));
        return promtoolAsync(['test', 'rules', join(dir, 'tests.yml')]).then((r) => ({
          alert,
          ...r,
        }));
      }),
    );
    for (const { alert, status, output } of results) {
      expect(status, `the tests still pass without ${alert}`).not.toBe(0);
      expect(output).toContain(`alertname: ${alert}`);
    }
  });

  it('every alert has a severity, a summary and a runbook section in docs/operations.md', () => {
    const ops = readFileSync('docs/operations.md', 'utf8');
    const anchors = new Set(
      [...ops.matchAll(/^#+ (.+)$/gm)].map((m) =>
        (m[1] ?? '')
          .toLowerCase()
          .replace(/[^a-z0-9 -]/g, '')
          .replace(/ /g, '-'),
      ),
    );
    for (const r of alertRules()) {
      expect(['critical', 'warning'], r.alert).toContain(r.labels?.severity);
      expect(r.annotations?.summary, r.alert).toBeTruthy();
      expect(r.annotations?.runbook, r.alert).toBe(`docs/operations.md#${r.alert.toLowerCase()}`);
      expect(anchors, `docs/operations.md has no section ${r.alert}`).toContain(
        r.alert.toLowerCase(),
      );
    }
  });

  it('every PromQL expression of the dashboards and the rules parses (promtool check rules)', () => {
    const exprs = shippedExpressions();
    expect(exprs.length).toBeGreaterThan(40);
    const file = join(tmp, 'expressions.yml');
    writeFileSync(
      file,
      stringify({
        groups: [
          {
            name: 'shipped-expressions',
            rules: exprs.map((e, i) => ({ record: `vigil:expression_${i}`, expr: e.expr })),
          },
        ],
      }),
    );
    const r = promtool(['check', 'rules', file]);
    expect(r.status, r.output).toBe(0);
    // And the check is real: one broken expression fails it.
    writeFileSync(
      file,
      stringify({ groups: [{ name: 'g', rules: [{ record: 'x:y', expr: 'sum(rate(x[1m])' }] }] }),
    );
    expect(promtool(['check', 'rules', file]).status).not.toBe(0);
  });

  it('finds the metric names of an expression', () => {
    expect(
      metricNames(
        'histogram_quantile(0.99, sum by (le, rule) (rate(vigil_x_bucket{a="b{c}", instance=~".*"}[5m]))) / on (rule) group_left (x) max without (p) (y_total offset 1h) > bool 2e3',
      ).sort(),
    ).toEqual(['vigil_x_bucket', 'y_total']);
    expect(metricNames('time() - max by (partition) (vigil_t)')).toEqual(['vigil_t']);
    expect(metricNames('count_values("controlSeq", vigil_c) and up')).toEqual(['vigil_c', 'up']);
  });
});

describe('Grafana dashboards', () => {
  const dir = 'dashboards/grafana/dashboards';

  it('the committed JSON is what dashboards.ts builds', () => {
    expect(readdirSync(dir).sort()).toEqual(Object.keys(DASHBOARDS).sort());
    for (const [file, d] of Object.entries(DASHBOARDS))
      expect(JSON.parse(readFileSync(join(dir, file), 'utf8')), file).toEqual(
        JSON.parse(JSON.stringify(d)),
      );
  });

  it('cover overview, rules, partitions and checkpoints, with unique uids and panel ids', () => {
    const uids = Object.values(DASHBOARDS).map((d) => d.uid);
    expect(uids).toEqual([
      'vigil-overview',
      'vigil-rules',
      'vigil-partitions',
      'vigil-checkpoints',
    ]);
    for (const d of Object.values(DASHBOARDS)) {
      const ids = d.panels.map((p) => p.id);
      expect(new Set(ids).size, d.uid).toBe(ids.length);
      for (const p of d.panels) {
        expect(p.targets.length, `${d.uid} / ${p.title}`).toBeGreaterThan(0);
        expect(p.gridPos.x + p.gridPos.w, `${d.uid} / ${p.title}`).toBeLessThanOrEqual(24);
      }
    }
  });

  it('use the provisioned datasource, and provisioning points where compose mounts the JSON', () => {
    const ds = parse(
      readFileSync('dashboards/grafana/provisioning/datasources/prometheus.yml', 'utf8'),
    ) as { datasources: { uid: string; type: string; url: string }[] };
    expect(ds.datasources).toEqual([
      expect.objectContaining({ uid: DATASOURCE_UID, type: 'prometheus' }),
    ]);
    for (const d of Object.values(DASHBOARDS))
      for (const p of d.panels) {
        expect(p.datasource.uid).toBe(DATASOURCE_UID);
        for (const t of p.targets) expect(t.datasource.uid).toBe(DATASOURCE_UID);
      }
    const providers = parse(
      readFileSync('dashboards/grafana/provisioning/dashboards/vigil.yml', 'utf8'),
    ) as { providers: { options: { path: string } }[] };
    const compose = parse(readFileSync('docker-compose.yml', 'utf8')) as {
      services: Record<string, { volumes?: string[] }>;
    };
    const mounts = compose.services.grafana?.volumes ?? [];
    for (const p of providers.providers)
      expect(mounts).toContainEqual(expect.stringMatching(`:${p.options.path}(:ro)?$`));
  });
});
