import { afterAll, describe, expect, it } from 'vitest';
import { startTestServers, type TestServers } from './servers.js';
import { apiClient, startTestVigil, testTokens } from './control-plane-client.js';

/**
 * Models travel in control messages, up to `limits.maxControlBytes` (8 MiB). The nats-server
 * configurations Vigil ships and writes take that much; a server that does not (NATS's default
 * `max_payload` is 1 MiB) gets a 413 that names its limit, not a 503.
 */
const tokens = testTokens();
const started: { servers: TestServers; vigil: Awaited<ReturnType<typeof startTestVigil>> }[] = [];

afterAll(async () => {
  for (const { servers, vigil } of started) {
    await vigil.stop();
    await servers.stop();
  }
});

async function vigilOn(natsMaxPayload?: string) {
  const servers = await startTestServers({
    partitions: 2,
    ...(natsMaxPayload === undefined ? {} : { natsMaxPayload }),
  });
  const vigil = await startTestVigil(servers, [tokens.write], { workers: 1, partitions: 2 });
  started.push({ servers, vigil });
  return apiClient(`${vigil.url}/v1`);
}

/** A lookup table of about 2 MB as JSON. */
const table = {
  kind: 'lookup',
  values: Array.from({ length: 120_000 }, (_, i) => `card-${i.toString(36).padStart(8, '0')}`),
};

describe('models larger than NATS default max_payload', () => {
  it('a 2 MB lookup table is applied with the shipped server configuration', async () => {
    const api = await vigilOn();
    const r = await api('PUT', '/models/cards', { token: tokens.write.token, body: table });
    expect(r.status, JSON.stringify(r.body).slice(0, 300)).toBeLessThan(300);
  });

  it('a server with the default 1 MiB max_payload answers 413 with its limit, not 503', async () => {
    const api = await vigilOn('1MB');
    const r = await api('PUT', '/models/cards', { token: tokens.write.token, body: table });
    expect(r.status).toBe(413);
    expect(r.body.error.code).toBe('VIGIL_E_TOO_LARGE');
    expect(r.body.error.message).toContain('max_payload is 1048576 bytes');
  });
});
