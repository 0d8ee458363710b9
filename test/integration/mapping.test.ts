import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveOptions, startService } from '../../service/index.js';
import { findExecutable, startNats } from '../../scripts/local-servers.js';

describe('servers the user runs (NATS_URL)', () => {
  it('refuses to start without the partition mapping, and shows the config line to add', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vigil-nomap-'));
    const conf = join(dir, 'nats.conf');
    writeFileSync(
      conf,
      `host: 127.0.0.1\nport: -1\njetstream { store_dir: ${JSON.stringify(join(dir, 'js'))} }\n`,
    );
    const child = spawn(findExecutable('nats-server') ?? 'nats-server', ['-c', conf], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      let log = '';
      child.stderr?.on('data', (c: Buffer) => (log += c.toString()));
      while (!/Server is ready/.test(log)) await new Promise((r) => setTimeout(r, 50));
      const port = /client connections on [^\s]*:(\d+)/.exec(log)?.[1];
      const options = resolveOptions(
        { natsUrl: `nats://127.0.0.1:${port}`, httpPort: 0, partitions: 16 },
        {},
      );
      await expect(startService(options, () => {})).rejects.toMatchObject({
        code: 'VIGIL_E_MAPPING_MISSING',
        message: expect.stringContaining(
          'mappings = { "events.*": "events.{{wildcard(1)}}.{{partition(16,1)}}" }',
        ),
      });
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a mapping with a different partition count', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vigil-map8-'));
    const nats = await startNats({ dataDir: dir, partitions: 8 });
    try {
      const options = resolveOptions({ natsUrl: nats.url, httpPort: 0, partitions: 16 }, {});
      await expect(startService(options, () => {})).rejects.toMatchObject({
        code: 'VIGIL_E_MAPPING_MISSING',
        message: expect.stringContaining('VIGIL_PARTITIONS=16'),
      });
    } finally {
      await nats.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
