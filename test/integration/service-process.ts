import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { eventually, partitionGauge, type TestServers } from './servers.js';

const root = resolve(import.meta.dirname, '../..');

/** How a service process starts: from the sources through tsx, or as built (`node dist/service/main.js`). */
export interface ServiceEntry {
  readonly cwd: string;
  readonly args: readonly string[];
}
const FROM_SOURCES: ServiceEntry = { cwd: root, args: ['--import', 'tsx', 'service/main.ts'] };

/** One service process (`service/main.ts`), as in production: it can be killed with SIGKILL. */
export class ServiceProcess {
  readonly child: ChildProcess;
  url = '';
  output = '';

  constructor(
    servers: TestServers,
    private readonly partitions: number,
    env: Record<string, string> = {},
    entry: ServiceEntry = FROM_SOURCES,
  ) {
    this.child = spawn(process.execPath, [...entry.args], {
      cwd: entry.cwd,
      env: {
        ...process.env,
        NATS_URL: servers.nats.url,
        REDIS_URL: servers.redis?.url ?? '',
        VIGIL_PARTITIONS: String(partitions),
        VIGIL_WORKERS: '2',
        VIGIL_HTTP_PORT: '0',
        VIGIL_TICK_INTERVAL_MS: '0',
        VIGIL_CHECKPOINT_INTERVAL_MS: '100',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child.stdout?.on('data', (c: Buffer) => (this.output += c.toString()));
    this.child.stderr?.on('data', (c: Buffer) => (this.output += c.toString()));
  }

  async ready(): Promise<void> {
    await eventually(
      () => /HTTP on (\S+)/.test(this.output) || this.child.exitCode !== null,
      30_000,
      'the service to start',
    );
    this.url = /HTTP on (\S+)/.exec(this.output)?.[1] ?? '';
    if (!this.url) throw new Error(`service did not start:\n${this.output}`);
    await eventually(
      async () => (await fetch(`${this.url}/readyz`).catch(() => undefined))?.status === 200,
      30_000,
      'the service to be ready',
    );
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    await new Promise<void>((r) =>
      this.child.exitCode !== null || this.child.signalCode !== null
        ? r()
        : this.child.once('exit', () => r()),
    );
  }

  /** EVENTS sequence each partition has processed, from /metrics. */
  async offsets(): Promise<number[]> {
    const offsets = await partitionGauge(this, 'vigil_partition_offset', this.partitions);
    return offsets.map((o) => o ?? 0);
  }
}
