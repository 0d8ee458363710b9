import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { connect } from '@nats-io/transport-node';
import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import { call, CliError, clientSettings, EXIT, type ClientSettings } from './cli-client.js';
import { conditionTree, table } from './cli-format.js';
import { jsonDiff } from './json-diff.js';

/** Where the CLI writes and what it reads: the process, or a test. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  readonly env: NodeJS.ProcessEnv;
  readonly cwd: string;
  /** Ends `alerts tail` (Ctrl-C in the process). */
  readonly signal?: AbortSignal;
}

export const USAGE = `vigil — the Vigil control plane from the command line

  vigil rules apply -f <file|dir> [--reason r]   create or replace rules (several: one atomic changeset)
  vigil rules list | get <id> | history <id>
  vigil rules diff <id> [--from v] [--to v] | diff <id> -f <file>
  vigil rules rollback <id> --to <version>
  vigil rules delete|pause|resume <id>
  vigil models put -f <file> | get <id> | list | delete <id>
  vigil validate -f <file|dir>
  vigil explain <ruleId> (-f <event.json> | --event '<json>') [--key k]
  vigil status
  vigil alerts tail [--rule id] [--severity s] [--from-start] [--limit n] [--nats url]

Options: --url (VIGIL_URL, default http://127.0.0.1:8080), --token (VIGIL_TOKEN, VIGIL_TOKEN_FILE,
or .vigil/api-token from npm start), --json (machine-readable output), --reason (recorded with the
change), --expect <version> (optimistic concurrency).
Exit codes: 0 ok, 1 not valid, 2 usage, 3 auth, 4 not found, 5 conflict, 6 unavailable.`;

const OPTIONS = {
  url: { type: 'string' },
  token: { type: 'string' },
  json: { type: 'boolean' },
  file: { type: 'string', short: 'f', multiple: true },
  reason: { type: 'string' },
  expect: { type: 'string' },
  to: { type: 'string' },
  from: { type: 'string' },
  event: { type: 'string' },
  key: { type: 'string' },
  rule: { type: 'string' },
  severity: { type: 'string' },
  'from-start': { type: 'boolean' },
  limit: { type: 'string' },
  nats: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type Flags = ReturnType<
  typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>
>['values'];

function readJsonFiles(
  paths: readonly string[] | undefined,
  cwd: string,
): { file: string; value: unknown }[] {
  if (paths === undefined || paths.length === 0)
    throw new CliError(EXIT.usage, 'name a file or folder with -f');
  const files = paths.flatMap((p) => {
    const abs = resolve(cwd, p);
    let st;
    try {
      st = statSync(abs);
    } catch {
      throw new CliError(EXIT.usage, `no such file or folder: ${p}`);
    }
    return st.isDirectory()
      ? readdirSync(abs)
          .filter((f) => f.endsWith('.json'))
          .sort()
          .map((f) => join(abs, f))
      : [abs];
  });
  return files.map((file) => {
    try {
      return { file, value: JSON.parse(readFileSync(file, 'utf8')) as unknown };
    } catch (e) {
      throw new CliError(EXIT.usage, `${file} is not JSON: ${(e as Error).message}`);
    }
  });
}

/** Rules in files: a rule, an array of rules, or `{"rules": [...]}`. */
function rulesIn(files: { file: string; value: unknown }[]): Record<string, unknown>[] {
  return files.flatMap(({ file, value }) => {
    const list = Array.isArray(value)
      ? value
      : Array.isArray((value as { rules?: unknown })?.rules)
        ? (value as { rules: unknown[] }).rules
        : [value];
    return list.map((r) => {
      if (typeof r !== 'object' || r === null || typeof (r as { id?: unknown }).id !== 'string')
        throw new CliError(EXIT.usage, `${file}: every rule needs a string "id"`);
      return r as Record<string, unknown>;
    });
  });
}

const arg = (positionals: string[], i: number, what: string): string => {
  const v = positionals[i];
  if (v === undefined) throw new CliError(EXIT.usage, `name the ${what}`);
  return v;
};

const when = (iso: unknown): string =>
  typeof iso === 'string' ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '-';

const ifMatch = (f: Flags): Record<string, string> => {
  const h: Record<string, string> = {};
  if (f.expect !== undefined) h['if-match'] = `"${f.expect}"`;
  if (f.reason !== undefined) h['x-vigil-reason'] = f.reason;
  return h;
};

async function rules(s: ClientSettings, f: Flags, p: string[], io: CliIo): Promise<number> {
  const sub = arg(
    p,
    1,
    'rules command (apply, list, get, history, diff, rollback, delete, pause, resume)',
  );
  const print = (body: unknown, human: () => string) =>
    io.out(f.json ? JSON.stringify(body, null, 2) : human());
  switch (sub) {
    case 'apply': {
      const list = rulesIn(readJsonFiles(f.file, io.cwd));
      if (list.length === 0) throw new CliError(EXIT.usage, 'no rules in the files named');
      const res =
        list.length === 1
          ? await call(
              s,
              'PUT',
              `/rules/${encodeURIComponent(String(list[0]?.id))}`,
              list[0],
              ifMatch(f),
            )
          : await call(
              s,
              'POST',
              '/changesets',
              { changes: list.map((rule) => ({ op: 'upsert-rule', rule })) },
              ifMatch(f),
            );
      const change = res.body.change as {
        seq: number;
        changes: { ruleId: string; action: string; reason?: string }[];
      };
      print(
        res.body,
        () =>
          `applied at control sequence ${change.seq}\n${table(
            ['RULE', 'STATE CHANGE', 'WHY'],
            change.changes.map((c) => [c.ruleId, c.action, c.reason]),
          )}`,
      );
      return EXIT.ok;
    }
    case 'list': {
      const { body } = await call(s, 'GET', '/rules');
      const rows = (body.rules as Record<string, unknown>[]).map((r) => {
        const lc = r.lastChange as Record<string, unknown> | undefined;
        return [r.id, r.state, r.version, r.severity, lc?.action, lc?.actor, when(lc?.at)];
      });
      print(body, () =>
        table(['ID', 'STATE', 'VERSION', 'SEVERITY', 'LAST CHANGE', 'BY', 'AT'], rows),
      );
      return EXIT.ok;
    }
    case 'get': {
      const { body } = await call(s, 'GET', `/rules/${encodeURIComponent(arg(p, 2, 'rule id'))}`);
      print(
        body,
        () =>
          `# version ${String(body.version)}, ${String(body.state)}\n${JSON.stringify(body.rule, null, 2)}`,
      );
      return EXIT.ok;
    }
    case 'history': {
      const { body } = await call(
        s,
        'GET',
        `/rules/${encodeURIComponent(arg(p, 2, 'rule id'))}/history`,
      );
      const rows = (body.revisions as Record<string, unknown>[]).map((r) => [
        r.seq,
        when(r.at),
        r.action,
        r.version,
        r.actor,
        r.reason,
        (r.diff as { path: string }[]).map((d) => d.path || '/').join(' '),
      ]);
      print(body, () => table(['SEQ', 'AT', 'ACTION', 'VERSION', 'BY', 'WHY', 'CHANGED'], rows));
      return EXIT.ok;
    }
    case 'diff': {
      const id = arg(p, 2, 'rule id');
      let diff: { op: string; path: string; before?: unknown; after?: unknown }[];
      let body: unknown;
      if (f.file !== undefined) {
        const local = rulesIn(readJsonFiles(f.file, io.cwd)).find((r) => r.id === id);
        if (local === undefined)
          throw new CliError(EXIT.usage, `no rule "${id}" in the files named`);
        const current = await call(s, 'GET', `/rules/${encodeURIComponent(id)}`).catch(
          (e: unknown) => {
            if (e instanceof CliError && e.exitCode === EXIT.notFound)
              return { body: { rule: undefined } };
            throw e;
          },
        );
        diff = jsonDiff(current.body.rule, local);
        body = { id, diff };
      } else {
        const q = new URLSearchParams();
        if (f.from !== undefined) q.set('from', f.from);
        if (f.to !== undefined) q.set('to', f.to);
        const res = await call(
          s,
          'GET',
          `/rules/${encodeURIComponent(id)}/diff${q.size > 0 ? `?${q}` : ''}`,
        );
        diff = res.body.diff as typeof diff;
        body = res.body;
      }
      print(body, () =>
        diff.length === 0
          ? 'no differences'
          : diff
              .map((d) =>
                d.op === 'add'
                  ? `+ ${d.path || '/'}: ${JSON.stringify(d.after)}`
                  : d.op === 'remove'
                    ? `- ${d.path || '/'}: ${JSON.stringify(d.before)}`
                    : `~ ${d.path || '/'}: ${JSON.stringify(d.before)} -> ${JSON.stringify(d.after)}`,
              )
              .join('\n'),
      );
      return EXIT.ok;
    }
    case 'rollback': {
      const id = arg(p, 2, 'rule id');
      if (f.to === undefined || !/^\d+$/.test(f.to))
        throw new CliError(
          EXIT.usage,
          'say which version with --to <version> (see vigil rules history)',
        );
      const { body } = await call(
        s,
        'POST',
        `/rules/${encodeURIComponent(id)}/rollback`,
        { version: Number(f.to) },
        ifMatch(f),
      );
      print(
        body,
        () =>
          `rule ${id} is back at the definition of version ${f.to}, now version ${String(body.version)}`,
      );
      return EXIT.ok;
    }
    case 'delete':
    case 'pause':
    case 'resume': {
      const id = arg(p, 2, 'rule id');
      const path = `/rules/${encodeURIComponent(id)}${sub === 'delete' ? '' : `/${sub}`}`;
      const { body } = await call(
        s,
        sub === 'delete' ? 'DELETE' : 'POST',
        path,
        undefined,
        ifMatch(f),
      );
      const seq = (body.change as { seq?: number } | undefined)?.seq;
      print(
        body,
        () =>
          `rule ${id}: ${sub === 'delete' ? 'deleted' : sub === 'pause' ? 'paused' : 'resumed'} at control sequence ${String(seq)}`,
      );
      return EXIT.ok;
    }
    default:
      throw new CliError(EXIT.usage, `unknown rules command "${sub}"\n\n${USAGE}`);
  }
}

async function models(s: ClientSettings, f: Flags, p: string[], io: CliIo): Promise<number> {
  const sub = arg(p, 1, 'models command (put, get, list, delete)');
  const print = (body: unknown, human: () => string) =>
    io.out(f.json ? JSON.stringify(body, null, 2) : human());
  if (sub === 'list') {
    const { body } = await call(s, 'GET', '/models');
    const rows = (body.models as Record<string, unknown>[]).map((m) => [
      m.id,
      m.kind,
      m.size,
      m.version,
      (m.lastChange as { actor?: string } | undefined)?.actor,
    ]);
    print(body, () => table(['ID', 'KIND', 'SIZE', 'VERSION', 'BY'], rows));
  } else if (sub === 'get') {
    const { body } = await call(s, 'GET', `/models/${encodeURIComponent(arg(p, 2, 'model id'))}`);
    print(body, () => JSON.stringify(body.model, null, 2));
  } else if (sub === 'put') {
    for (const { file, value } of readJsonFiles(f.file, io.cwd)) {
      const id = (value as { id?: unknown })?.id;
      if (typeof id !== 'string')
        throw new CliError(EXIT.usage, `${file}: the model needs a string "id"`);
      const { body } = await call(s, 'PUT', `/models/${encodeURIComponent(id)}`, value, ifMatch(f));
      print(
        body,
        () =>
          `model ${id} (${String(body.kind)}, ${String(body.size)} entries) at version ${String(body.version)}`,
      );
    }
  } else if (sub === 'delete') {
    const id = arg(p, 2, 'model id');
    const { body } = await call(
      s,
      'DELETE',
      `/models/${encodeURIComponent(id)}`,
      undefined,
      ifMatch(f),
    );
    print(body, () => `model ${id} deleted`);
  } else throw new CliError(EXIT.usage, `unknown models command "${sub}"\n\n${USAGE}`);
  return EXIT.ok;
}

async function validate(s: ClientSettings, f: Flags, io: CliIo): Promise<number> {
  let code: number = EXIT.ok;
  const results: unknown[] = [];
  for (const rule of rulesIn(readJsonFiles(f.file, io.cwd))) {
    try {
      const { body } = await call(s, 'POST', '/rules/validate', rule);
      results.push({ id: rule.id, valid: true, changes: body.changes });
      if (!f.json) io.out(`✓ ${String(rule.id)}`);
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
async function alertsTail(f: Flags, p: string[], io: CliIo): Promise<number> {
  if (p[1] !== 'tail')
    throw new CliError(
      EXIT.usage,
      `unknown alerts command "${p[1] ?? ''}"; try: vigil alerts tail`,
    );
  const limit = f.limit === undefined ? Infinity : Number(f.limit);
  if (!(limit > 0)) throw new CliError(EXIT.usage, '--limit must be a positive number');
  const servers = f.nats ?? io.env.NATS_URL ?? 'nats://127.0.0.1:4222';
  const nc = await connect({ servers }).catch((e: Error) => {
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
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
  } catch (e) {
    io.err(`${(e as Error).message}\n\n${USAGE}`);
    return EXIT.usage;
  }
  const { values: f, positionals: p } = parsed;
  if (f.help || p.length === 0) {
    (f.help ? io.out : io.err)(USAGE);
    return f.help ? EXIT.ok : EXIT.usage;
  }
  const s = clientSettings(f, io.env, io.cwd);
  try {
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
      case 'alerts':
        return await alertsTail(f, p, io);
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
