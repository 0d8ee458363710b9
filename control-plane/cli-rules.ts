import { call, CliError, EXIT, type ClientSettings } from './cli-client.js';
import { table } from './cli-format.js';
import { arg, ifMatch, printer, readJsonFiles, rulesIn, when } from './cli-shared.js';
import type { CliIo, Flags } from './cli-shared.js';
import { jsonDiff } from './json-diff.js';

/** `vigil rules …` */
export async function rules(s: ClientSettings, f: Flags, p: string[], io: CliIo): Promise<number> {
  const sub = arg(
    p,
    1,
    'rules command (apply, list, get, stats, history, diff, rollback, delete, pause, resume)',
  );
  const print = printer(f, io);
  switch (sub) {
    case 'apply': {
      const list = rulesIn(readJsonFiles(f.file, io.cwd));
      if (list.length === 0) throw new CliError(EXIT.usage, 'no rules in the files named');
      if (list.length > 1 && f.expect !== undefined)
        throw new CliError(EXIT.usage, "--expect names one rule's version: apply one rule with it");
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
    case 'stats': {
      const id = arg(p, 2, 'rule id');
      const { body } = await call(s, 'GET', `/rules/${encodeURIComponent(id)}/stats`);
      print(body, () => statsText(body));
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
      throw new CliError(EXIT.usage, `unknown rules command "${sub}"; see vigil --help`);
  }
}

/** `vigil models …` */
export async function models(s: ClientSettings, f: Flags, p: string[], io: CliIo): Promise<number> {
  const sub = arg(p, 1, 'models command (put, get, list, delete)');
  const print = printer(f, io);
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
  } else throw new CliError(EXIT.usage, `unknown models command "${sub}"; see vigil --help`);
  return EXIT.ok;
}

/** `vigil rules stats <id>` for a person: counters of this process, a hint for each problem. */
function statsText(b: Record<string, unknown>): string {
  const n = (k: string): number => (typeof b[k] === 'number' ? b[k] : 0);
  const lines = [
    `rule ${String(b.id)} (counters of the service process since it started)`,
    `  matches ${n('matches')}, alerts ${n('alerts')}, errors ${n('errors')}, quarantines ${n('quarantines')}, state overflows ${n('overflows')}`,
    `  events of its types without its key field: ${n('keyMissing')}`,
  ];
  if (n('keyMissing') > 0)
    lines.push(
      `  ! ${n('keyMissing')} events lacked the key field: the rule judges none of them; check the field's name (vigil validate shows it on a sample)`,
    );
  const last = b.lastFired as Record<string, unknown> | null | undefined;
  lines.push(
    last
      ? `  last alert ${String(last.alertId)} for key ${String(last.key)} at ${String(last.eventTime ?? last.publishedAt)} (version ${String(last.ruleVersion)})`
      : '  no alert in ALERTS yet',
  );
  return lines.join('\n');
}
