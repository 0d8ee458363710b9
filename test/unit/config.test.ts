import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import { resolveOptions } from '../../service/index.js';
import { natsConfig } from '../../scripts/local-servers.js';
import { partitionOf } from '../../protocol/index.js';

describe('service options', () => {
  it('defaults, then environment variables, then overrides', () => {
    const o = resolveOptions(
      { httpPort: 9000 },
      { NATS_URL: 'nats://10.0.0.1:4222', VIGIL_PARTITIONS: '8', VIGIL_WORKERS: '3' },
    );
    expect(o).toMatchObject({
      natsUrl: 'nats://10.0.0.1:4222',
      partitions: 8,
      workers: 3,
      httpPort: 9000,
      outOfOrderMs: 1000,
    });
    expect(o.limits.maxRules).toBe(10_000);
  });

  it('reports every bad setting at once, by name and variable', () => {
    expect(() =>
      resolveOptions(
        {},
        { VIGIL_PARTITIONS: 'many', VIGIL_HTTP_PORT: '70000', NATS_URL: 'localhost' },
      ),
    ).toThrow(
      expect.objectContaining({
        code: 'VIGIL_E_VALIDATION',
        problems: [
          expect.objectContaining({
            pointer: '/httpPort',
            message: expect.stringContaining('VIGIL_HTTP_PORT'),
          }),
          expect.objectContaining({
            pointer: '/partitions',
            message: expect.stringContaining('VIGIL_PARTITIONS'),
          }),
          expect.objectContaining({ pointer: '/natsUrl' }),
        ],
      }),
    );
  });

  it('re-keying settings: on by default; off, or with a partition key; bad values named', () => {
    expect(resolveOptions({}, {})).toMatchObject({
      rekey: 'on',
      partitionKey: '',
      rekeyReportMs: 1000,
    });
    expect(
      resolveOptions(
        {},
        { VIGIL_REKEY: 'off', VIGIL_PARTITION_KEY: 'payer,bank', VIGIL_REKEY_REPORT_MS: '200' },
      ),
    ).toMatchObject({ rekey: 'off', partitionKey: 'payer,bank', rekeyReportMs: 200 });
    let problems: { pointer: string; message: string }[] = [];
    try {
      resolveOptions({}, { VIGIL_REKEY: 'yes', VIGIL_PARTITION_KEY: 'payer,,payer' });
    } catch (e) {
      problems = (e as { problems: typeof problems }).problems;
    }
    expect(problems.map((p) => p.pointer)).toEqual(['/rekey', '/partitionKey']);
    expect(problems[0]?.message).toContain('VIGIL_REKEY');
    expect(problems[1]?.message).toContain('distinct field names');
  });

  it('lease settings: defaults, variables, instance id from host and port', () => {
    const o = resolveOptions({}, { VIGIL_LEASE_TTL_MS: '3000', VIGIL_LEASE_RENEW_MS: '500' });
    expect(o).toMatchObject({ leaseTtlMs: 3000, leaseRenewMs: 500 });
    expect(o.instanceId).toBe(`${hostname()}:8080`);
    expect(resolveOptions({}, {})).toMatchObject({ leaseTtlMs: 10_000, leaseRenewMs: 2000 });
    expect(resolveOptions({}, { VIGIL_INSTANCE_ID: 'pod-7' }).instanceId).toBe('pod-7');
  });

  it('refuses lease settings that could lose leases or let a replayed alert through twice', () => {
    const problems = (env: Record<string, string>): unknown => {
      try {
        resolveOptions({}, env);
        return [];
      } catch (e) {
        return (e as { problems: unknown }).problems;
      }
    };
    expect(problems({ VIGIL_LEASE_TTL_MS: '3000', VIGIL_LEASE_RENEW_MS: '1500' })).toEqual([
      expect.objectContaining({
        pointer: '/leaseRenewMs',
        message: expect.stringMatching(/VIGIL_LEASE_RENEW_MS.*a third of "leaseTtlMs"/),
      }),
    ]);
    expect(problems({ VIGIL_DUPLICATE_WINDOW_MS: '10500' })).toEqual([
      expect.objectContaining({
        pointer: '/duplicateWindowMs',
        message: expect.stringMatching(
          /VIGIL_DUPLICATE_WINDOW_MS.*exceed "leaseTtlMs" \+ "checkpointIntervalMs" \(10000 \+ 1000 ms\)/,
        ),
      }),
    ]);
    expect(problems({ VIGIL_INSTANCE_ID: 'a b' })).toEqual([
      expect.objectContaining({ pointer: '/instanceId' }),
    ]);
  });
});

describe('partitioning', () => {
  it('is FNV-1a of the key modulo P, as nats-server computes it', () => {
    // FNV-1a-32("a") = 0xe40c292c
    expect(partitionOf('a', 1 << 30)).toBe(0xe40c292c % (1 << 30));
    expect(partitionOf('c-19', 16)).toBe(partitionOf('c-19', 16));
  });

  it('the shipped nats.conf is the one the start script writes for 16 partitions', () => {
    const shipped = readFileSync(new URL('../../config/nats.conf', import.meta.url), 'utf8');
    const generated = natsConfig({ port: 4222, storeDir: '.vigil/nats/jetstream', partitions: 16 });
    const settings = (s: string) =>
      s.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#'));
    expect(settings(shipped)).toEqual(settings(generated));
  });
});
