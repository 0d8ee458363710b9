import { createServer } from 'node:net';

/**
 * The servers `npm start` starts unless told to use one it does not: what each is, its port when
 * nothing moves it (the README's and the CLI's), the variable that moves the port and the one that
 * names a server to use instead.
 */
export const START_SERVERS = {
  nats: { user: 'nats-server', port: 4222, env: 'VIGIL_NATS_PORT', urlEnv: 'NATS_URL' },
  redis: { user: 'redis-server', port: 6379, env: 'VIGIL_REDIS_PORT', urlEnv: 'REDIS_URL' },
} as const;

/** What listens on the service's HTTP port. */
export const HTTP_PORT_USER = "the service's HTTP server";

/** What listens on a port `npm start` needs. */
export type PortUser =
  (typeof START_SERVERS)[keyof typeof START_SERVERS]['user'] | typeof HTTP_PORT_USER;

/** A port `npm start` will listen on, and the setting that moves it. */
export interface PortPlan {
  readonly user: PortUser;
  readonly host: string;
  /** 0: any free port (nothing to check). */
  readonly port: number;
  /** The environment variable that moves it. */
  readonly env: string;
  /** Another way out, said after the setting (e.g. "use the server already there"). */
  readonly otherwise?: string;
}

/**
 * The ports `npm start` will listen on: nats-server's and redis-server's when it starts them
 * (`VIGIL_NATS_PORT`, `VIGIL_REDIS_PORT`, default 4222 and 6379, 0: a free one) and the service's
 * HTTP port (the service's own setting). Returns the plan and every problem of the settings, each
 * a line naming the variable.
 */
export function startPorts(
  env: NodeJS.ProcessEnv,
  opts: { startNats: boolean; startRedis: boolean; httpHost: string; httpPort: number },
): { plans: PortPlan[]; problems: string[] } {
  const problems: string[] = [];
  const portOf = (name: string, fallback: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const n = Number(raw);
    if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(n) || n > 65535) {
      problems.push(
        `${name} must be a port number from 0 to 65535 (0: any free one), got "${raw}"`,
      );
      return fallback;
    }
    return n;
  };
  const plans: PortPlan[] = [];
  const started = [
    [opts.startNats, START_SERVERS.nats],
    [opts.startRedis, START_SERVERS.redis],
  ] as const;
  for (const [start, s] of started)
    if (start)
      plans.push({
        user: s.user,
        host: '127.0.0.1',
        port: portOf(s.env, s.port),
        env: s.env,
        otherwise: `or ${s.urlEnv} to use a ${s.user} you run`,
      });
  plans.push({
    user: HTTP_PORT_USER,
    host: opts.httpHost,
    port: opts.httpPort,
    env: 'VIGIL_HTTP_PORT',
  });
  for (let i = 0; i < plans.length; i++)
    for (let j = i + 1; j < plans.length; j++) {
      const [a, b] = [plans[i] as PortPlan, plans[j] as PortPlan];
      if (a.port !== 0 && a.port === b.port)
        problems.push(
          `${a.user} and ${b.user} would both listen on port ${a.port}; set ${a.env} or ${b.env} to another port (0: any free one)`,
        );
    }
  return { plans, problems };
}

/** The one line that refuses to start because `plan`'s port cannot be listened on (`code`: EADDRINUSE, EACCES …). */
export function portRefusal(plan: PortPlan, code: string): string {
  const what = code === 'EADDRINUSE' ? 'is in use' : `cannot be listened on (${code})`;
  return `port ${plan.port} on ${plan.host} (${plan.user}) ${what}: set ${plan.env} to another port (0: any free one)${plan.otherwise === undefined ? '' : `, ${plan.otherwise}`}`;
}

/**
 * Whether a port can be listened on now: undefined if so, else the error's code (EADDRINUSE when
 * something listens there). It listens and closes at once.
 */
export function portProblem(host: string, port: number): Promise<string | undefined> {
  if (port === 0) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    s.listen({ host, port, exclusive: true }, () => s.close(() => resolve(undefined)));
  });
}

/** Every refusal for the ports of `plans` (none: all can be listened on). */
export async function portRefusals(plans: readonly PortPlan[]): Promise<string[]> {
  const codes = await Promise.all(plans.map((p) => portProblem(p.host, p.port)));
  return plans.flatMap((p, i) => {
    const code = codes[i];
    return code === undefined ? [] : [portRefusal(p, code)];
  });
}
