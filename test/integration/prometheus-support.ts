import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parse, stringify } from 'yaml';
import { DASHBOARDS } from '../../dashboards/grafana/dashboards.js';
import { ensurePrometheusInstalled, freePort } from '../../scripts/local-servers.js';

export const PROMETHEUS_DIR = resolve('dashboards/prometheus');
export const PROMETHEUS_CONFIG = join(PROMETHEUS_DIR, 'prometheus.yml');
export const ALERT_RULES = join(PROMETHEUS_DIR, 'rules/vigil-alerts.yml');
export const ALERT_TESTS = join(PROMETHEUS_DIR, 'tests/vigil-alerts.test.yml');

/** Runs promtool; the global setup has installed it. */
export function promtool(args: string[], input?: string): { status: number; output: string } {
  const { promtool: exe } = ensurePrometheusInstalled();
  const r = spawnSync(exe, args, { encoding: 'utf8', input, timeout: 60_000 });
  return { status: r.status ?? -1, output: `${r.stdout}${r.stderr}` };
}

/** {@link promtool}, without blocking: several can run at once. */
export function promtoolAsync(args: string[]): Promise<{ status: number; output: string }> {
  const { promtool: exe } = ensurePrometheusInstalled();
  return new Promise((done, fail) => {
    const child = spawn(exe, args, { stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    child.once('error', fail);
    child.once('close', (code) => done({ status: code ?? -1, output }));
  });
}

interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** The alerting rules as parsed YAML. */
export function alertRules(): AlertRule[] {
  const doc = parse(readFileSync(ALERT_RULES, 'utf8')) as { groups: { rules: AlertRule[] }[] };
  return doc.groups.flatMap((g) => g.rules);
}

/** Grafana's variables, replaced by values that make the expression plain PromQL. */
export function withoutGrafanaVariables(expr: string, rateInterval = '1m'): string {
  return expr.replaceAll('$__rate_interval', rateInterval).replaceAll('$instance', '.*');
}

/** Every PromQL expression the project ships: each dashboard target and each alerting rule. */
export function shippedExpressions(rateInterval = '1m'): { where: string; expr: string }[] {
  const out: { where: string; expr: string }[] = [];
  for (const [file, d] of Object.entries(DASHBOARDS))
    for (const p of d.panels)
      for (const t of p.targets)
        out.push({
          where: `${file} / ${p.title} / ${t.refId}`,
          expr: withoutGrafanaVariables(t.expr, rateInterval),
        });
  for (const r of alertRules()) out.push({ where: `alert ${r.alert}`, expr: r.expr });
  return out;
}

/** PromQL words that look like metric names but are not. */
const NOT_METRICS = new Set([
  'and',
  'or',
  'unless',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'offset',
  'bool',
  'inf',
  'nan',
  // Aggregation operators may have `by (…)` between them and their parenthesis.
  'sum',
  'min',
  'max',
  'avg',
  'group',
  'stddev',
  'stdvar',
  'count',
  'count_values',
  'bottomk',
  'topk',
  'quantile',
]);

/**
 * The metric names a PromQL expression selects. A small scanner, not a parser: strings, label
 * matchers, ranges and label lists are removed first; what is left that is neither a number
 * (with its unit), a function call nor a keyword is a metric name. Tests check it on samples.
 */
export function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const m of stripped.matchAll(
    /\d+(?:\.\d+)?(?:e[+-]?\d+)?[a-z]*|([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?/gi,
  )) {
    const [, name, call] = m;
    if (name === undefined || call !== undefined || NOT_METRICS.has(name.toLowerCase())) continue;
    names.add(name);
  }
  return [...names];
}

/** The sample names an exposition can have: each declared family, with its histogram/summary series. */
export function exportedNames(exposition: string): Set<string> {
  const names = new Set<string>();
  for (const m of exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    const [, name = '', type] = m;
    names.add(name);
    if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(name + s);
    if (type === 'summary') for (const s of ['_sum', '_count']) names.add(name + s);
  }
  return names;
}

/** A Prometheus server this test started. */
export interface PrometheusHandle {
  readonly url: string;
  /** GET /api/v1/<path>; throws unless the API answers "success". */
  api<T>(path: string, params?: Record<string, string>): Promise<T>;
  stop(): Promise<void>;
}

/**
 * Starts Prometheus on loopback with the shipped prometheus.yml, changed only where a test must:
 * the scrape target, 1 s intervals, and the rules by absolute path. Data goes in `dir`.
 */
export async function startPrometheus(opts: {
  dir: string;
  target: string;
}): Promise<PrometheusHandle> {
  const { prometheus } = ensurePrometheusInstalled();
  mkdirSync(opts.dir, { recursive: true });
  const config = parse(readFileSync(PROMETHEUS_CONFIG, 'utf8')) as {
    global: Record<string, string>;
    rule_files: string[];
    scrape_configs: { static_configs: { targets: string[] }[] }[];
  };
  config.global.scrape_interval = '1s';
  config.global.evaluation_interval = '1s';
  config.rule_files = config.rule_files.map((f) => join(PROMETHEUS_DIR, f));
  for (const sc of config.scrape_configs)
    for (const st of sc.static_configs) st.targets = [opts.target];
  const configFile = join(opts.dir, 'prometheus.yml');
  writeFileSync(configFile, stringify(config));
  const port = await freePort();
  const child = spawn(
    prometheus,
    [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${join(opts.dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let log = '';
  child.stdout.on('data', (c: Buffer) => (log += c.toString()));
  child.stderr.on('data', (c: Buffer) => (log += c.toString()));
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  const url = `http://127.0.0.1:${port}`;
  const until = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`prometheus exited:\n${log.slice(-2000)}`);
    const ready = await fetch(`${url}/-/ready`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) break;
    if (Date.now() > until) {
      child.kill('SIGKILL');
      throw new Error(`prometheus not ready within 30 s:\n${log.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    async api<T>(path: string, params: Record<string, string> = {}): Promise<T> {
      const res = await fetch(`${url}/api/v1/${path}?${new URLSearchParams(params)}`);
      const body = (await res.json()) as { status: string; data: T; error?: string };
      if (body.status !== 'success')
        throw new Error(`prometheus ${path} ${JSON.stringify(params)}: ${body.error}`);
      return body.data;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
