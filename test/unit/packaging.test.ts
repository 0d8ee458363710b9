import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { dockerStages, execForm } from '../dockerfile.js';

/** No Docker engine runs here: these tests check what can be checked without one. */

import { compose, mounts, service } from '../compose.js';

const tmp = mkdtempSync(join(tmpdir(), 'vigil-packaging-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('docker-compose.yml', () => {
  it('has the stack: nats, redis, the service, prometheus, grafana', () => {
    expect(Object.keys(compose.services).sort()).toEqual(
      ['grafana', 'nats', 'prometheus', 'redis', 'vigil'].sort(),
    );
    expect(service('vigil').build).toBe('.');
    // The service exits when NATS is not there at start-up: it waits for healthy servers.
    expect(service('vigil').depends_on).toEqual({
      nats: { condition: 'service_healthy' },
      redis: { condition: 'service_healthy' },
    });
  });

  it('mounts only paths that exist, and declares every named volume', () => {
    for (const name of Object.keys(compose.services))
      for (const [source] of mounts(name)) {
        if (source.startsWith('.') || source.startsWith('/'))
          expect(existsSync(source), `${name} mounts ${source}`).toBe(true);
        else
          expect(Object.keys(compose.volumes), `${name} uses volume ${source}`).toContain(source);
      }
  });

  it('runs nats with the shipped config and its JetStream data on a volume', () => {
    const nats = service('nats');
    const [, confTarget] = mounts('nats').find(([s]) => s === './config/nats.conf') ?? [];
    expect(nats.command).toContain(confTarget);
    // The config's store_dir is relative: it must resolve onto the volume.
    const storeDir = /store_dir:\s*"([^"]+)"/.exec(readFileSync('config/nats.conf', 'utf8'))?.[1];
    expect(storeDir?.startsWith('/')).toBe(false);
    const volumeTargets = mounts('nats')
      .filter(([s]) => !s.startsWith('.'))
      .map(([, t]) => t);
    expect(volumeTargets).toContain(nats.working_dir);
  });

  it('points the service at nats and redis, and Prometheus and Grafana at what they need', () => {
    const env = service('vigil').environment ?? {};
    expect(new URL(env.NATS_URL ?? '').hostname).toBe('nats');
    expect(new URL(env.REDIS_URL ?? '').hostname).toBe('redis');
    expect(env.VIGIL_HTTP_HOST).toBe('0.0.0.0');
    // Prometheus scrapes the service where it listens.
    const prom = parse(readFileSync('dashboards/prometheus/prometheus.yml', 'utf8')) as {
      scrape_configs: { job_name: string; static_configs: { targets: string[] }[] }[];
    };
    const targets = prom.scrape_configs.flatMap((c) => c.static_configs.flatMap((s) => s.targets));
    expect(targets).toEqual([`vigil:${env.VIGIL_HTTP_PORT}`]);
    // Its config file is the mounted prometheus.yml.
    const [, promTarget] =
      mounts('prometheus').find(([s]) => s === './dashboards/prometheus') ?? [];
    expect(service('prometheus').command).toContain(`--config.file=${promTarget}/prometheus.yml`);
    // Grafana's datasource is the prometheus service.
    const ds = parse(
      readFileSync('dashboards/grafana/provisioning/datasources/prometheus.yml', 'utf8'),
    ) as { datasources: { url: string }[] };
    expect(ds.datasources.map((d) => new URL(d.url).host)).toEqual(['prometheus:9090']);
    const home = service('grafana').environment?.GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH ?? '';
    const [, dashTarget] =
      mounts('grafana').find(([s]) => s === './dashboards/grafana/dashboards') ?? [];
    expect(home).toBe(`${dashTarget}/vigil-overview.json`);
  });
});

describe('Dockerfile', () => {
  const stages = dockerStages();
  const final = stages.at(-1) ?? { from: '', lines: [] };

  it('builds in one stage and runs in a slim Node LTS image as a non-root user', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(final.from).toMatch(/^FROM node:(20|22)-[a-z]+-slim\b/);
    const user = final.lines.filter((l) => l.startsWith('USER ')).at(-1);
    expect(user).toBeDefined();
    expect(user).not.toMatch(/^USER (root|0)\b/);
  });

  it('gives the service user the one folder start.ts writes to', () => {
    // start.ts writes .vigil/api-token when no API tokens are configured; /app is root's.
    expect(readFileSync('scripts/start.ts', 'utf8')).toContain('.vigil/api-token');
    const user = final.lines
      .filter((l) => l.startsWith('USER '))
      .at(-1)
      ?.slice(5);
    expect(final.lines).toContain(`RUN mkdir /app/.vigil && chown ${user}:${user} /app/.vigil`);
  });

  it('keeps only production dependencies in the final image', () => {
    const build = stages.slice(0, -1).flatMap((s) => s.lines);
    expect(build.some((l) => /^RUN npm (prune|ci)\b.*--omit=dev/.test(l))).toBe(true);
    expect(final.lines.some((l) => /^RUN npm (ci|install)\b/.test(l))).toBe(false);
  });

  it('starts with what `npm start -- --no-demo` runs, and checks /readyz', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as {
      scripts: Record<string, string>;
    };
    // `npm start` first installs missing npm packages; the image has them, so it runs the rest.
    const steps = (pkg.scripts.start ?? '').split('&&').map((s) => s.trim());
    expect(steps[0]).toBe('node scripts/ensure-deps.mjs');
    expect(execForm(final.lines.find((l) => l.startsWith('CMD ')))).toEqual([
      ...(steps.at(-1) ?? '').split(/\s+/),
      '--no-demo',
    ]);
    const health = final.lines.find((l) => l.startsWith('HEALTHCHECK '));
    expect(health).toMatch(/\/readyz/);
    expect(health).toContain('VIGIL_HTTP_PORT');
    expect(final.lines.some((l) => /^ENV .*VIGIL_HTTP_HOST=0\.0\.0\.0/.test(l))).toBe(true);
  });

  it('copies only paths that exist, and .dockerignore keeps local data out', () => {
    for (const s of stages)
      for (const l of s.lines.filter((x) => x.startsWith('COPY ') && !x.includes('--from='))) {
        const parts = l.split(/\s+/).slice(1);
        for (const source of parts.slice(0, -1))
          expect(existsSync(source), `${s.from}: ${l}`).toBe(true);
      }
    const ignore = readFileSync('.dockerignore', 'utf8').split('\n');
    for (const p of ['node_modules', '.vigil', '.git']) expect(ignore).toContain(p);
  });
});
