import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { RunningService } from '../../service/index.js';
import { eventually, startTestServers, startTestService, type TestServers } from './servers.js';

const P = 4;

let servers: TestServers | undefined;
let service: RunningService | undefined;
let blocker: Server | undefined;

afterEach(async () => {
  await service?.stop();
  await servers?.stop();
  await new Promise((r) => (blocker ? blocker.close(r) : r(undefined)));
  service = undefined;
  servers = undefined;
  blocker = undefined;
});

describe('a service that cannot start serving (real nats-server and redis-server)', () => {
  it('rejects when its HTTP port is taken, and stops what it started: its leases go at once', async () => {
    servers = await startTestServers({ partitions: P, redis: true });
    const taken = createServer();
    blocker = taken;
    const port = await new Promise<number>((resolve) =>
      taken.listen(0, '127.0.0.1', () => resolve((taken.address() as { port: number }).port)),
    );
    await expect(
      startTestService(servers, { partitions: P, httpPort: port, leaseTtlMs: 30_000 }),
    ).rejects.toThrow(/EADDRINUSE/);
    // Leases left held (and renewed) by the failed start would keep partitions from this one for
    // good, or until their 30 s TTL after its threads were stopped.
    ({ service } = await startTestService(servers, { partitions: P, leaseTtlMs: 30_000 }));
    const running = service;
    await eventually(
      () => running.ownership?.leases().size === P,
      8_000,
      'every partition to be leased by the second start',
    );
  });
});
