import { parseArgs } from 'node:util';
import { connect } from '@nats-io/transport-node';
import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import { call, CliError, clientSettings, EXIT, type ClientSettings } from './cli-client.js';
import { dlq, DLQ_OPTIONS } from './cli-dlq.js';
import { conditionTree, table } from './cli-format.js';
import { models, rules } from './cli-rules.js';
import { arg, OPTIONS, readJsonFiles, rulesIn, when } from './cli-shared.js';
import type { CliIo, Flags } from './cli-shared.js';

export type { CliIo } from './cli-shared.js';

export const USAGE = `vigil — the Vigil control plane from the command line

  vigil rules apply -f <file|dir> [--reason r]   create or replace rules (several: one atomic changeset)
  vigil rules list | get <id> | stats <id> | history <id>
  vigil rules diff <id> [--from v] [--to v] | diff <id> -f <file>
  vigil rules rollback <id> --to <version>
  vigil rules delete|pause|resume <id>
  vigil models put -f <file> | get <id> | list | delete <id>
  vigil validate -f <file|dir>
  vigil explain <ruleId> (-f <event.json> | --event '<json>') [--key k]
  vigil backtest [--from seq|time] [--to seq|time] [-f candidate-rules]   replay EVENTS, publish nothing
  vigil status
  vigil alerts tail [--rule id] [--severity s] [--from-start] [--limit n] [--nats url]
  vigil dlq tail [--reason r] [--rule id] [--from-start] [--limit n]   follow dead letters (Ctrl-C ends)
  vigil dlq stats [--since 1h|<time>|<seq>]                            dead letters per reason
  vigil dlq replay (--seq n[,n…] | --reason r [--rule id] [--since t] [--until t] [--after seq] [--limit n]) [--dry-run]

Options: --url (VIGIL_URL, or .vigil/api-url from npm start, default http://127.0.0.1:8080), --token
(VIGIL_TOKEN, VIGIL_TOKEN_FILE, or .vigil/api-token from npm start), --config <file> (VIGIL_CLI_CONFIG, default
~/.config/vigil/cli.json: {"url", "token", "nats"}), --json (machine-readable output), --reason (recorded with the
change), --expect <version> (optimistic concurrency).
Exit codes: 0 ok, 1 not valid, 2 usage, 3 auth, 4 not found, 5 conflict, 6 unavailable.`;

async function validate(s: ClientSettings, f: Flags, io: CliIo): Promise<number> {
  let code: number = EXIT.ok;
  const results: unknown[] = [];
  for (const rule of rulesIn(readJsonFiles(f.file, io.cwd))) {
    try {
      const { body } = await call(s, 'POST', '/rules/validate', rule);
      const warnings = (body.warnings ?? []) as { message: string }[];
      results.push({ id: rule.id, valid: true, changes: body.changes, warnings });
      if (!f.json) {
        io.out(`✓ ${String(rule.id)}`);
        // Valid, but a sample of EVENTS says it may never match: worth a look, not a failure.
        for (const w of warnings) io.out(`  ! ${w.message}`);
      }
    } catch (e) {
      if (!(e instanceof CliError) || e.exitCode !== EXIT.invalid) throw e;
      code = EXIT.invalid;
      results.push({ id: rule.id, valid: false, error: (e.body as { error?: unknown })?.error });
      if (!f.json) io.out(`✗ ${String(rule.id)}: ${e.message}`);
    }
  }
  if (f.json) io.out(JSON.stringify(results, null, 2));
  return code;
}

async function explain(s: ClientSettings, f: Flags, p: string[], io: CliIo): Promise<number> {
  const id = arg(p, 1, 'rule id');
  let event: unknown;
  if (f.event !== undefined) {
    try {
      event = JSON.parse(f.event);
    } catch (e) {
      throw new CliError(EXIT.usage, `--event is not JSON: ${(e as Error).message}`);
    }
  } else event = readJsonFiles(f.file, io.cwd)[0]?.value;
  const { body } = await call(s, 'POST', `/rules/${encodeURIComponent(id)}/explain`, {
    event,
    ...(f.key === undefined ? {} : { key: f.key }),
  });
  if (f.json) io.out(JSON.stringify(body, null, 2));
  else {
    const c = body.checks as {
      type: { passed: boolean; on: string[] };
      key: { field: string | null; value: unknown; passed: boolean };
      when?: { conditions: unknown };
    };
    const lines = [
      `rule ${id} version ${String(body.version)}${body.paused ? ' (paused)' : ''}: ${String(body.verdict)}`,
      `${c.type.passed ? '✓' : '✗'} type in ${JSON.stringify(c.type.on)}`,
      `${c.key.passed ? '✓' : '✗'} key ${c.key.field ?? '(partition key)'} = ${JSON.stringify(c.key.value)}`,
      ...(c.when === undefined ? [] : ['when:', ...conditionTree(c.when.conditions, '  ')]),
    ];
    const pattern = body.pattern as { note?: string } | undefined;
    if (pattern?.note) lines.push(`pattern: ${pattern.note}`);
    io.out(lines.join('\n'));
  }
  return body.verdict === 'error' ? EXIT.invalid : EXIT.ok;
}

const bound = (v: string | undefined): { seq: number } | { time: string } | undefined =>
  v === undefined ? undefined : /^\d+$/.test(v) ? { seq: Number(v) } : { time: v };

/** Starts a back-test, shows its progress, prints what each rule would alert. */
async function backtest(s: ClientSettings, f: Flags, io: CliIo): Promise<number> {
  const candidate =
    f.file === undefined
      ? undefined
      : {
          changes: rulesIn(readJsonFiles(f.file, io.cwd)).map((rule) => ({
            op: 'upsert-rule',
            rule,
          })),
        };
  const started = await call(s, 'POST', '/backtest', {
    ...(f.from === undefined ? {} : { from: bound(f.from) }),
    ...(f.to === undefined ? {} : { to: bound(f.to) }),
    ...(candidate === undefined ? {} : { candidate }),
  });
  const id = String(started.body.id);
  const cancel = () => void call(s, 'DELETE', `/backtest/${id}`).catch(() => undefined);
  io.signal?.addEventListener('abort', cancel);
  let job = started.body;
  while (job.status === 'running') {
    await new Promise((r) => setTimeout(r, 200));
    job = (await call(s, 'GET', `/backtest/${id}`)).body;
    const p = job.progress as { read: number; total: number };
    if (io.progress && p.total > 0) {
      const share = Math.min(1, p.read / p.total);
      const bar = '#'.repeat(Math.round(share * 30)).padEnd(30, '.');
      io.progress(`[${bar}] ${Math.round(share * 100)}% ${p.read}/${p.total} records`);
    }
  }
  io.signal?.removeEventListener('abort', cancel);
  io.progress?.('');
  // Ctrl-C cancelled the run (or it ended meanwhile): the user stopped it, which is 130, not a
  // failure of the service.
  if (io.signal?.aborted === true)
    throw new CliError(EXIT.interrupted, `back-test ${String(job.status)}: interrupted`, job);
  if (job.status !== 'done')
    throw new CliError(
      EXIT.unavailable,
      `back-test ${String(job.status)}: ${String(job.error ?? '')}`,
      job,
    );
  const r = job.result as {
    range: { fromSeq: number; toSeq: number; records: number };
    truncated: boolean;
    current: { alerts: number; perRule: Record<string, number> };
    candidate?: { alerts: number };
    diff?: {
      perRule: { ruleId: string; current: number; candidate: number }[];
      onlyCurrent: unknown[];
      onlyCandidate: unknown[];
    };
  };
  if (f.json) io.out(JSON.stringify(r, null, 2));
  else {
    const head = `${r.range.records} records (EVENTS ${r.range.fromSeq}..${r.range.toSeq})${r.truncated ? ', stopped at the record limit' : ''}`;
    io.out(
      r.diff === undefined
        ? `${head}: ${r.current.alerts} alerts\n${table(['RULE', 'ALERTS'], Object.entries(r.current.perRule).sort())}`
        : `${head}: ${r.current.alerts} alerts from the rules in force, ${r.candidate?.alerts ?? 0} from the candidate; ${r.diff.onlyCandidate.length} only from the candidate, ${r.diff.onlyCurrent.length} only from the rules in force\n` +
            table(
              ['RULE', 'IN FORCE', 'CANDIDATE'],
              r.diff.perRule.map((x) => [x.ruleId, x.current, x.candidate]),
            ),
    );
  }
  return EXIT.ok;
}

async function status(s: ClientSettings, f: Flags, io: CliIo): Promise<number> {
  const { body } = await call(s, 'GET', '/status');
  if (f.json) io.out(JSON.stringify(body, null, 2));
  else {
    const a = body.activationSeconds as { p50: number | null; p99: number | null };
    const rows = (body.partitions as Record<string, unknown>[]).map((x) => [
      x.partition,
      x.owner,
      x.controlSeqApplied,
      x.onLatest ? 'yes' : 'no',
      x.offset,
      x.lag,
      when(x.lastCheckpoint),
    ]);
    io.out(
      `ready: ${String(body.ready)}; control sequence ${String(body.controlSeq)} (latest accepted ${String(body.latestAcceptedControlSeq)}); all partitions on it: ${body.allOnLatest ? 'yes' : 'no'}; activation p50 ≤ ${a.p50 ?? '-'} s, p99 ≤ ${a.p99 ?? '-'} s\n` +
        table(
          ['PARTITION', 'OWNER', 'CONTROL SEQ', 'LATEST', 'OFFSET', 'LAG', 'LAST CHECKPOINT'],
          rows,
        ),
    );
  }
  return body.ready ? EXIT.ok : EXIT.unavailable;
}

/** Follows ALERTS on NATS directly (alerts are not in the REST API): new ones, or all with --from-start. */
async function alertsTail(s: ClientSettings, f: Flags, p: string[], io: CliIo): Promise<number> {
  if (p[1] !== 'tail')
    throw new CliError(
      EXIT.usage,
      `unknown alerts command "${p[1] ?? ''}"; try: vigil alerts tail`,
    );
  const limit = f.limit === undefined ? Infinity : Number(f.limit);
  if (!(limit > 0)) throw new CliError(EXIT.usage, '--limit must be a positive number');
  const servers = s.nats;
  const user = s.natsUser === undefined ? {} : { user: s.natsUser, pass: s.natsPassword };
  const nc = await connect({ servers, ...user }).catch((e: Error) => {
    throw new CliError(
      EXIT.unavailable,
      `cannot reach NATS at ${servers}: ${e.message}; set --nats or NATS_URL`,
    );
  });
  try {
    const consumer = await jetstream(nc).consumers.get('ALERTS', {
      // One filter as a string: nats-server 2.9 takes a single filter_subject.
      filter_subjects: `alerts.${f.severity ?? '*'}.${f.rule ?? '*'}`,
      deliver_policy: f['from-start'] ? DeliverPolicy.All : DeliverPolicy.New,
    });
    const messages = await consumer.consume();
    io.signal?.addEventListener('abort', () => void messages.close());
    let n = 0;
    for await (const m of messages) {
      const a = m.json<{
        ts: number;
        severity: string;
        ruleId: string;
        ruleVersion: number;
        key: string;
        title: string;
      }>();
      io.out(
        f.json
          ? JSON.stringify(a)
          : `${new Date(a.ts).toISOString()}  ${a.severity.padEnd(8)} ${a.ruleId}@${a.ruleVersion}  ${a.key}  ${a.title}`,
      );
      if (++n >= limit) break;
    }
    await messages.close();
  } finally {
    await nc.close();
  }
  return EXIT.ok;
}

/** Runs one `vigil` command; returns its exit code. */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      options: { ...OPTIONS, ...DLQ_OPTIONS },
      allowPositionals: true,
      strict: true,
    });
  } catch (e) {
    io.err(`${(e as Error).message}\n\n${USAGE}`);
    return EXIT.usage;
  }
  const { values: f, positionals: p } = parsed;
  if (f.help || p.length === 0) {
    (f.help ? io.out : io.err)(USAGE);
    return f.help ? EXIT.ok : EXIT.usage;
  }
  try {
    const s = clientSettings(f, io.env, io.cwd);
    switch (p[0]) {
      case 'rules':
        return await rules(s, f, p, io);
      case 'models':
        return await models(s, f, p, io);
      case 'validate':
        return await validate(s, f, io);
      case 'explain':
        return await explain(s, f, p, io);
      case 'status':
        return await status(s, f, io);
      case 'backtest':
        return await backtest(s, f, io);
      case 'alerts':
        return await alertsTail(s, f, p, io);
      case 'dlq':
        return await dlq(s, f, p, io);
      default:
        throw new CliError(EXIT.usage, `unknown command "${p[0]}"\n\n${USAGE}`);
    }
  } catch (e) {
    if (!(e instanceof CliError)) throw e;
    if (f.json && e.body !== undefined) io.out(JSON.stringify(e.body, null, 2));
    io.err(`vigil: ${e.message}`);
    return e.exitCode;
  }
}
