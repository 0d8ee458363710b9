import { describe, expect, it } from 'vitest';
import {
  HTTP_PORT_USER,
  portRefusal,
  START_SERVERS,
  startPorts,
  type PortPlan,
} from '../../scripts/start-ports.js';

const http = { httpHost: '127.0.0.1', httpPort: 8080 };
const both = { startNats: true, startRedis: true, ...http };

describe('startPorts: the ports npm start checks before it starts anything', () => {
  it('is nats-server 4222, redis-server 6379 and the HTTP port, each with the variable that moves it', () => {
    const { plans, problems } = startPorts({}, both);
    expect(problems).toEqual([]);
    expect(plans.map((p) => [p.user, p.host, p.port, p.env])).toEqual([
      [START_SERVERS.nats.user, '127.0.0.1', 4222, 'VIGIL_NATS_PORT'],
      [START_SERVERS.redis.user, '127.0.0.1', 6379, 'VIGIL_REDIS_PORT'],
      [HTTP_PORT_USER, '127.0.0.1', 8080, 'VIGIL_HTTP_PORT'],
    ]);
  });

  it('takes VIGIL_NATS_PORT and VIGIL_REDIS_PORT (0: a free one; empty: the default)', () => {
    const { plans, problems } = startPorts(
      { VIGIL_NATS_PORT: '4223', VIGIL_REDIS_PORT: '0' },
      both,
    );
    expect(problems).toEqual([]);
    expect(plans.map((p) => p.port)).toEqual([4223, 0, 8080]);
    expect(startPorts({ VIGIL_NATS_PORT: '' }, both).plans[0]?.port).toBe(4222);
  });

  it('leaves out the servers it does not start (NATS_URL, REDIS_URL set)', () => {
    const { plans } = startPorts({}, { startNats: false, startRedis: false, ...http });
    expect(plans.map((p) => p.user)).toEqual([HTTP_PORT_USER]);
  });

  it('reports a port that is not a number, naming the variable', () => {
    for (const bad of ['abc', '-1', '65536', '4222.5', '1e3']) {
      const { problems } = startPorts({ VIGIL_REDIS_PORT: bad }, both);
      expect(problems, bad).toHaveLength(1);
      expect(problems[0]).toContain('VIGIL_REDIS_PORT');
      expect(problems[0]).toContain(`"${bad}"`);
    }
  });

  it('reports two servers on one port, naming both variables; two free ports (0) do not clash', () => {
    const { problems } = startPorts({ VIGIL_NATS_PORT: '8080' }, both);
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/port 8080.*VIGIL_NATS_PORT or VIGIL_HTTP_PORT/);
    expect(
      startPorts({ VIGIL_NATS_PORT: '0', VIGIL_REDIS_PORT: '0' }, { ...both, httpPort: 0 })
        .problems,
    ).toEqual([]);
  });
});

describe('portRefusal', () => {
  const nats: PortPlan = {
    user: START_SERVERS.nats.user,
    host: '127.0.0.1',
    port: 4222,
    env: 'VIGIL_NATS_PORT',
    otherwise: 'or NATS_URL to use a nats-server you run',
  };

  it('is one line naming the port, what needs it and the setting that moves it', () => {
    const line = portRefusal(nats, 'EADDRINUSE');
    expect(line).toBe(
      'port 4222 on 127.0.0.1 (nats-server) is in use: set VIGIL_NATS_PORT to another port (0: any free one), or NATS_URL to use a nats-server you run',
    );
    expect(line).not.toContain('\n');
  });

  it('says why when the port is not in use but cannot be listened on', () => {
    expect(portRefusal({ ...nats, port: 80 }, 'EACCES')).toContain(
      'port 80 on 127.0.0.1 (nats-server) cannot be listened on (EACCES)',
    );
  });
});
