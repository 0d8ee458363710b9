import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServiceProcess } from './service-process.js';
import { eventually, startTestServers, type TestServers, readAlerts } from './servers.js';

const root = resolve(import.meta.dirname, '../..');
const P = 2;
let dir: string | undefined;
let servers: TestServers | undefined;
let service: ServiceProcess | undefined;

beforeAll(async () => {
  // Built in a clone of its own: the build replaces dist/ as a whole.
  dir = mkdtempSync(join(tmpdir(), 'vigil-compiled-'));
  const cwd = join(dir, 'vigil');
  const clone = spawnSync('git', ['clone', '--quiet', '--depth', '1', `file://${root}`, cwd], {
    encoding: 'utf8',
  });
  expect(clone.status, clone.stderr).toBe(0);
  symlinkSync(join(root, 'node_modules'), join(cwd, 'node_modules'));
  const built = spawnSync(process.execPath, ['scripts/build.mjs', '--quiet'], {
    cwd,
    encoding: 'utf8',
  });
  expect(built.status, built.stderr).toBe(0);
  servers = await startTestServers({ partitions: P, redis: true });
  service = new ServiceProcess(servers, P, {}, { cwd, args: ['dist/service/main.js'] });
}, 60_000);

afterAll(async () => {
  await service?.kill();
  await servers?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('the service process as built (bundled dist/service/main.js and worker.js)', () => {
  it('starts, judges events by a rule published on CONTROL, and stops cleanly on SIGTERM', async () => {
    const s = servers as TestServers;
    const p = service as ServiceProcess;
    await p.ready();
    await s.js.publish(
      'vigil.control',
      JSON.stringify({
        op: 'upsert-rule',
        rule: {
          id: 'big',
          on: ['payment'],
          when: { all: [{ fact: 'amount', operator: 'greaterThan', value: 100 }] },
          alert: { severity: 'high', title: 'big payment' },
        },
      }),
    );
    // Published until one is judged under the rule: events before its markers meet no rule.
    let n = 0;
    await eventually(
      async () => {
        await s.js.publish(`events.card-${n++}`, JSON.stringify({ type: 'payment', amount: 500 }));
        const alerts = await readAlerts(s);
        return alerts.some((a) => a.ruleId === 'big');
      },
      30_000,
      'an alert from the compiled service',
    );
    await p.kill('SIGTERM');
    expect(p.child.exitCode, p.output).toBe(0);
  });
});
