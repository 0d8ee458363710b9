/**
 * The recovery phase of `npm run bench:checkpoint`: recovery of a real service process after
 * `kill -9`, as the issue asks for it. Its own nats-server and redis-server (random ports, a temp
 * folder), a service process started as production runs it (compiled: `dist/service/main.js`;
 * default partitions and workers, checkpoints every 1 s), one sliding-window rule, one event per
 * key until the service holds `keys` keys of window state, a checkpoint covering every event
 * (read from Redis), then SIGKILL, a fresh process, and the times to ready, to every partition
 * running and to the first judged events.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { connect, createInbox, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { Redis } from 'ioredis';
import type { Alert } from '../rules/index.js';
import { DEFAULT_OPTIONS } from '../service/index.js';
import {
  ensureServersInstalled,
  startNats,
  startRedis,
  type ServerHandle,
} from '../scripts/local-servers.js';
import { CONTROL_SUBJECT, eventSubject, partitionOf } from '../protocol/index.js';
import type { WorkerStatus } from '../service/index.js';
import { velocityRule } from './rule-sets.js';

const root = resolve(import.meta.dirname, '..');
const PARTITIONS = DEFAULT_OPTIONS.partitions;
const OUT_OF_ORDER_MS = DEFAULT_OPTIONS.outOfOrderMs;
/** Every fill event adds 1 to its key's window; a probe adds THRESHOLD − 1, so its alert proves the restored window. */
const THRESHOLD = 1000;
const RULE = { ...velocityRule(THRESHOLD), alert: { severity: 'high' } };

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const secs = (ms: number): number => Number((ms / 1000).toFixed(3));
const encoder = new TextEncoder();

/** Resident memory of a process, from /proc (bytes). */
function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

/** CPU time a process has used so far (user + system, seconds), from /proc. */
function cpuOf(pid: number | undefined): number {
  if (pid === undefined) return NaN;
  // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/**
 * A service process, started as production runs it: the compiled `dist/service/main.js`
 * ({@link measureServiceRecovery} builds it first); its output lines are timed.
 */
class ServiceProcess {
  readonly child: ChildProcess;
  readonly spawnedAt = Date.now();
  readonly lines: { at: number; text: string }[] = [];
  private partial = '';

  constructor(env: Record<string, string>, nodeArgs: readonly string[] = []) {
    this.child = spawn(
      process.execPath,
      [...nodeArgs, '--enable-source-maps', 'dist/service/main.js'],
      {
        cwd: root,
        env: { ...process.env, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const onData = (c: Buffer): void => {
      const at = Date.now();
      const parts = (this.partial + c.toString()).split('\n');
      this.partial = parts.pop() ?? '';
      for (const text of parts) this.lines.push({ at, text });
    };
    this.child.stdout?.on('data', onData);
    this.child.stderr?.on('data', onData);
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The first output line matching `re`, with its time. */
  line(re: RegExp): { at: number; text: string } | undefined {
    return this.lines.find((l) => re.test(l.text));
  }

  get url(): string | undefined {
    return /HTTP on (\S+)/.exec(this.line(/HTTP on /)?.text ?? '')?.[1];
  }

  async readyz(): Promise<{ ok: boolean; workers: WorkerStatus[] } | undefined> {
    const url = this.url;
    if (url === undefined) return undefined;
    const res = await fetch(`${url}/readyz`).catch(() => undefined);
    if (res === undefined) return undefined;
    const body = (await res.json()) as { workers: WorkerStatus[] };
    return { ok: res.status === 200, workers: body.workers };
  }

  /**
   * Polls /readyz every `everyMs` until it answers 200; resolves with the time it did. Not more
   * often: each poll costs the recovering process's main thread about a millisecond of a CPU
   * that the restore is short of (polled every 10 ms, express and HTTP were ~0.4 s of its 1.8 s
   * in a profile of the recovery).
   */
  async whenReady(timeoutMs: number, everyMs = 50): Promise<number> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      if (!this.alive) throw new Error(`the service exited:\n${this.output()}`);
      if ((await this.readyz())?.ok) return Date.now();
      if (Date.now() > until) throw new Error(`service not ready in ${timeoutMs} ms`);
      await sleep(everyMs);
    }
  }

  async kill(signal: NodeJS.Signals): Promise<void> {
    if (this.alive) this.child.kill(signal);
    await new Promise<void>((r) => (this.alive ? this.child.once('exit', () => r()) : r()));
  }

  output(): string {
    return this.lines.map((l) => l.text).join('\n');
  }
}

/** Core publishes with JetStream acks on one inbox, at most `window` unacknowledged. */
async function publishAll(
  nc: NatsConnection,
  n: number,
  next: (i: number) => [subject: string, data: Uint8Array],
  window = 4000,
): Promise<void> {
  const inbox = createInbox();
  let acked = 0;
  let error: string | undefined;
  let wake: (() => void) | undefined;
  const sub = nc.subscribe(inbox, {
    callback: (err: Error | null, m: Msg) => {
      acked++;
      if (err !== null) error ??= err.message;
      else if (m.headers?.hasError) error ??= `status ${m.headers.code}`;
      else if (m.data[2] === 0x65 /* {"error" */) error ??= new TextDecoder().decode(m.data);
      if (wake !== undefined && i - acked <= window / 2) {
        const w = wake;
        wake = undefined;
        w();
      }
    },
  });
  let i = 0;
  try {
    while (i < n) {
      if (error !== undefined) throw new Error(`a publish failed: ${error}`);
      if (i - acked >= window) await new Promise<void>((r) => (wake = r));
      const [subject, data] = next(i);
      nc.publish(subject, data, { reply: inbox });
      i++;
    }
    const until = Date.now() + 60_000;
    while (acked < n && Date.now() < until) await sleep(5);
    if (error !== undefined || acked < n)
      throw new Error(`publishes failed: ${error ?? `${n - acked} unacknowledged`}`);
  } finally {
    sub.unsubscribe();
  }
}

/** Polls /metrics until every partition has applied control sequence `seq`. */
async function activated(service: ServiceProcess, seq: number, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const text = await (await fetch(`${service.url}/metrics`)).text();
    const applied = [...text.matchAll(/^vigil_control_seq_applied\{partition="\d+"\} (\d+)/gm)];
    if (applied.length === PARTITIONS && applied.every((m) => Number(m[1]) >= seq)) return;
    if (Date.now() > until)
      throw new Error(`rule not applied on every partition in ${timeoutMs} ms`);
    await sleep(100);
  }
}

/**
 * Waits until the checkpoints in Redis cover every fill event: each key has its state field, and
 * no partition's checkpoint holds a buffered event (each event has been judged into its window:
 * no meta lists one, no chunk is left).
 */
async function covered(redisUrl: string, keys: number, timeoutMs: number): Promise<number[]> {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  try {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const pipe = redis.pipeline();
      for (let p = 0; p < PARTITIONS; p++) {
        pipe.hlen(`vigil:p:${p}:state`);
        pipe.hget(`vigil:p:${p}`, 'meta');
        // Chunks of buffered events (format v4): deleted once the watermark has passed them all.
        pipe.hlen(`vigil:p:${p}:buffer`);
      }
      const r = ((await pipe.exec()) ?? []).map(([err, v]) => {
        if (err) throw err;
        return v;
      });
      const lens = r.filter((_, i) => i % 3 === 0).map(Number);
      const metas = r.filter((_, i) => i % 3 === 1) as (string | null)[];
      const chunks = r.filter((_, i) => i % 3 === 2).map(Number);
      const empty =
        metas.every(
          (m) =>
            m !== null && ((JSON.parse(m) as { buffer?: unknown[] }).buffer ?? []).length === 0,
        ) && chunks.every((n) => n === 0);
      if (empty && lens.reduce((a, b) => a + b, 0) === keys) return lens;
      if (Date.now() > until)
        throw new Error(`no checkpoint covered every event in ${timeoutMs} ms (${lens.join(',')})`);
      await sleep(250);
    }
  } finally {
    redis.disconnect();
  }
}

export interface RecoveryOptions {
  readonly keys: number;
  /** Node options of the restarted process, e.g. `--cpu-prof --cpu-prof-dir=DIR`. */
  readonly nodeArgs?: readonly string[];
  /** Also print the restarted process's output, each line with its ms since the spawn. */
  readonly serviceLog?: boolean;
  readonly log: (line: string) => void;
}

/** Runs the phase; resolves with the figures for the bench's JSON line. */
export async function measureServiceRecovery(o: RecoveryOptions): Promise<Record<string, number>> {
  const dir = mkdtempSync(join(tmpdir(), 'vigil-bench-recovery-'));
  const live: ServiceProcess[] = [];
  const servers: ServerHandle[] = [];
  // Nothing is left behind, whatever happens: a bench that dies still ends what it started.
  const onExit = (): void => {
    for (const s of live) if (s.alive) s.child.kill('SIGKILL');
    for (const s of servers) s.process.kill('SIGKILL');
  };
  process.once('exit', onExit);
  let nc: NatsConnection | undefined;
  try {
    const built = spawnSync(process.execPath, ['scripts/build.mjs', '--quiet'], {
      cwd: root,
      stdio: 'inherit',
    });
    if (built.status !== 0) throw new Error('scripts/build.mjs failed: see its output above');
    ensureServersInstalled((line) => console.log(`[recovery] ${line}`));
    const nats = await startNats({ dataDir: join(dir, 'nats'), partitions: PARTITIONS });
    servers.push(nats);
    const redis = await startRedis({ dataDir: join(dir, 'redis') });
    servers.push(redis);
    nc = await connect({ servers: nats.url });
    const js = jetstream(nc);
    const env = {
      NATS_URL: nats.url,
      REDIS_URL: redis.url,
      VIGIL_HTTP_PORT: '0',
      // The restarted process is the same instance: it takes the dead one's leases back at once.
      VIGIL_INSTANCE_ID: 'bench-recovery',
      VIGIL_CHECKPOINT_INTERVAL_MS: '1000',
    };
    const start = (nodeArgs?: readonly string[]): ServiceProcess => {
      const s = new ServiceProcess(env, nodeArgs);
      live.push(s);
      return s;
    };

    const first = start();
    await first.whenReady(60_000, 50);
    const pid = first.child.pid as number;
    const workers = (await first.readyz())?.workers.length ?? 0;
    const ack = await js.publish(
      CONTROL_SUBJECT,
      encoder.encode(JSON.stringify({ op: 'upsert-rule', rule: RULE })),
    );
    await activated(first, ack.seq, 30_000);
    const rssBaseline = rssOf(pid);
    o.log(
      `service ready (${workers} workers, ${PARTITIONS} partitions), rule applied; RSS ${(rssBaseline / 1e6).toFixed(0)} MB`,
    );

    let t = Date.now();
    const payload = encoder.encode('{"type":"payment","amount":1}');
    await publishAll(nc, o.keys, (i) => [eventSubject(`k${i}`), payload]);
    const filledAt = Date.now();
    const fillSeconds = secs(filledAt - t);
    o.log(`published ${o.keys} events (one per key) in ${fillSeconds} s`);
    t = Date.now();
    const lens = await covered(redis.url, o.keys, Math.max(120_000, o.keys / 5));
    const coveredSeconds = secs(Date.now() - t);
    const rss = rssOf(pid);
    o.log(
      `a checkpoint covers every event ${coveredSeconds} s after the fill; keys per partition ${Math.min(...lens)}-${Math.max(...lens)}; RSS ${(rss / 1e6).toFixed(0)} MB`,
    );

    // One probe per partition, on a key the fill gave state: it fires only on the restored window.
    // A second event, stamped now, moves the watermark past it so it is judged at once. The probe
    // is stamped that much earlier, not the second event later: an event's time counts no later
    // than its store time, so an event stamped ahead moves nothing, and the probe would wait for
    // the partition's next tick (a second or two: what this figure measured from the event-time
    // change until 2026-12-05).
    const probes = new Map<number, string>();
    const pushers = new Map<number, string>();
    for (let i = 0; probes.size < PARTITIONS || pushers.size < PARTITIONS; i++) {
      const key = `k${i}`;
      const p = partitionOf(key, PARTITIONS);
      if (!probes.has(p)) probes.set(p, key);
      else if (!pushers.has(p)) pushers.set(p, key);
      if (i >= o.keys) throw new Error('too few keys for a probe in every partition');
    }
    const alerts = new Map<string, number>();
    const sub = nc.subscribe('alerts.>', {
      callback: (_err, m) => {
        const a = m.json<Alert>();
        if (a.ruleId === RULE.id && !alerts.has(a.key)) alerts.set(a.key, Date.now());
      },
    });

    // The probe, stamped OUT_OF_ORDER_MS + 500 ms before the kill, must be later than every
    // event of the fill: earlier, it would be late, or left out of its key's window.
    const probeLead = OUT_OF_ORDER_MS + 500;
    await sleep(Math.max(0, filledAt + probeLead + 500 - Date.now()));
    const serverCpu = (): [number, number] => [cpuOf(nats.process.pid), cpuOf(redis.process.pid)];
    const killedAt = Date.now();
    await first.kill('SIGKILL');
    const cpuAtKill = serverCpu();
    const second = start(o.nodeArgs);
    const spawnedAt = second.spawnedAt;
    o.log(`killed with SIGKILL; a new process spawned ${spawnedAt - killedAt} ms later`);
    const ts = Date.now();
    await Promise.all(
      [...probes].flatMap(([p, key]) => [
        js.publish(
          eventSubject(key),
          encoder.encode(
            JSON.stringify({ type: 'payment', amount: THRESHOLD - 1, ts: ts - probeLead }),
          ),
        ),
        js.publish(
          eventSubject(pushers.get(p) as string),
          encoder.encode(JSON.stringify({ type: 'payment', amount: 0, ts })),
        ),
      ]),
    );
    const readyAt = await second.whenReady(120_000);
    const status = (await second.readyz())?.workers ?? [];
    const starts = status.flatMap((w) => w.started);
    if (starts.length !== PARTITIONS)
      throw new Error(`ready with ${starts.length} partitions running, not ${PARTITIONS}`);
    const runningAt = Math.max(...starts.map((s) => s.at));
    const until = Date.now() + 120_000;
    while (alerts.size < PARTITIONS && Date.now() < until) await sleep(5);
    sub.unsubscribe();
    if (alerts.size < PARTITIONS)
      throw new Error(`${alerts.size} of ${PARTITIONS} probe alerts after the restart`);
    const cpuAtJudged = serverCpu();
    const serviceCpu = cpuOf(second.child.pid);
    const times = [...alerts.values()];
    const judgedAt = Math.max(...times);
    const firstJudgedAt = Math.min(...times);
    const httpAt = second.line(/HTTP on /)?.at ?? NaN;
    const restoredKeys = starts.reduce((n, s) => n + s.keys, 0);
    const sum = (f: (s: (typeof starts)[number]) => number): number =>
      starts.reduce((n, s) => n + f(s), 0);
    const max = (f: (s: (typeof starts)[number]) => number): number => Math.max(...starts.map(f));
    o.log(
      `after the kill: /readyz OK ${readyAt - killedAt} ms, every partition running ${runningAt - killedAt} ms, first probe judged ${firstJudgedAt - killedAt} ms, all ${judgedAt - killedAt} ms`,
    );
    o.log(
      `new process: HTTP up ${httpAt - spawnedAt} ms after spawn; first partition running ${Math.min(...starts.map((s) => s.at)) - spawnedAt} ms, last ${runningAt - spawnedAt} ms; per partition reading Redis ≤ ${max((s) => s.loadMs).toFixed(0)} ms (sum ${sum((s) => s.loadMs).toFixed(0)}), restoring ≤ ${max((s) => s.restoreMs).toFixed(0)} ms (sum ${sum((s) => s.restoreMs).toFixed(0)}), consumer ≤ ${max((s) => s.consumerMs).toFixed(0)} ms; ${restoredKeys} keys restored`,
    );
    o.log(
      `CPU from kill to judged: service ${serviceCpu.toFixed(2)} s, nats-server ${(cpuAtJudged[0] - cpuAtKill[0]).toFixed(2)} s, redis-server ${(cpuAtJudged[1] - cpuAtKill[1]).toFixed(2)} s (2 cores: ${(((judgedAt - killedAt) / 1000) * 2).toFixed(1)} s available)`,
    );
    await second.kill('SIGTERM');
    if (o.serviceLog) for (const l of second.lines) o.log(`  +${l.at - spawnedAt} ms ${l.text}`);
    return {
      recoveryKeys: o.keys,
      recoveryPartitions: PARTITIONS,
      recoveryWorkers: workers,
      recoveryRestoredKeys: restoredKeys,
      fillSeconds,
      checkpointCoveredSeconds: coveredSeconds,
      serviceRssBytes: rss,
      serviceRssBaselineBytes: rssBaseline,
      serviceRssBytesPerKey: Math.round((rss - rssBaseline) / o.keys),
      killToSpawnMs: spawnedAt - killedAt,
      recoveryReadySeconds: secs(readyAt - killedAt),
      recoveryPartitionsRunningSeconds: secs(runningAt - killedAt),
      recoveryFirstJudgedSeconds: secs(firstJudgedAt - killedAt),
      recoverySeconds: secs(judgedAt - killedAt),
      spawnToHttpSeconds: secs(httpAt - spawnedAt),
      spawnToReadySeconds: secs(readyAt - spawnedAt),
      spawnToPartitionsRunningSeconds: secs(runningAt - spawnedAt),
      spawnToJudgedSeconds: secs(judgedAt - spawnedAt),
      restoreLoadMaxSeconds: secs(max((s) => s.loadMs)),
      restoreLoadSumSeconds: secs(sum((s) => s.loadMs)),
      restoreStateMaxSeconds: secs(max((s) => s.restoreMs)),
      restoreStateSumSeconds: secs(sum((s) => s.restoreMs)),
      restoreConsumerMaxSeconds: secs(max((s) => s.consumerMs)),
      recoveryCpuSecondsService: Number(serviceCpu.toFixed(2)),
      recoveryCpuSecondsNats: Number((cpuAtJudged[0] - cpuAtKill[0]).toFixed(2)),
      recoveryCpuSecondsRedis: Number((cpuAtJudged[1] - cpuAtKill[1]).toFixed(2)),
    };
  } finally {
    for (const s of live) await s.kill('SIGKILL');
    await nc?.close();
    for (const s of servers.reverse()) await s.stop();
    process.off('exit', onExit);
    rmSync(dir, { recursive: true, force: true });
  }
}
