import { call, CliError, EXIT, type ClientSettings } from './cli-client.js';
import { table } from './cli-format.js';
import { arg, when, type CliIo, type Flags } from './cli-shared.js';
import type { LetterView } from './dlq-letter.js';

/** The flags only `vigil dlq` takes (merged with the shared ones by `runCli`). */
export const DLQ_OPTIONS = {
  seq: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  after: { type: 'string' },
  'dry-run': { type: 'boolean' },
} as const;

/** The shared flags and those of {@link DLQ_OPTIONS}. */
export type DlqFlags = Flags & {
  seq?: string;
  since?: string;
  until?: string;
  after?: string;
  'dry-run'?: boolean;
};

/**
 * How long one poll of `vigil dlq tail` waits on the server (ms). Short, so Ctrl-C ends the
 * process soon: the request it leaves open keeps Node running until it answers.
 */
const TAIL_WAIT_MS = 1000;

/** One line per letter: sequence (what `replay --seq` takes), time, reason, source, rule, error, payload. */
export function letterLine(l: LetterView): string {
  const source = l.source === null ? '-' : `${l.source.subject}#${l.source.seq}`;
  return [
    `#${l.seq}`,
    when(l.time),
    l.reason,
    source,
    ...(l.rule === undefined ? [] : [`rule ${l.rule}`]),
    l.error === '' ? '-' : l.error,
    l.preview,
  ].join('  ');
}

function query(params: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, String(v));
  const s = q.toString();
  return s === '' ? '' : `?${s}`;
}

function positive(v: string | undefined, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 1)
    throw new CliError(EXIT.usage, `${flag} must be a positive integer`);
  return n;
}

/** Follows `DLQ` through the API's long poll: new letters, or all with --from-start, until Ctrl-C or --limit. */
async function tail(s: ClientSettings, f: DlqFlags, io: CliIo): Promise<number> {
  const limit = positive(f.limit, '--limit') ?? Infinity;
  const filter = { reason: f.reason, rule: f.rule };
  let cursor = 0;
  if (!f['from-start'])
    cursor = (await call(s, 'GET', `/dlq${query({ limit: 0 })}`)).body.cursor as number;
  const stopped = new Promise<undefined>((resolve) => {
    if (io.signal?.aborted === true) resolve(undefined);
    io.signal?.addEventListener('abort', () => resolve(undefined), { once: true });
  });
  let n = 0;
  while (n < limit && io.signal?.aborted !== true) {
    const page = await Promise.race([
      call(
        s,
        'GET',
        `/dlq${query({ ...filter, after: cursor, wait: TAIL_WAIT_MS, limit: Math.min(limit - n, 1000) })}`,
      ),
      stopped,
    ]);
    if (page === undefined) break;
    for (const l of page.body.letters as LetterView[]) {
      io.out(f.json ? JSON.stringify(l) : letterLine(l));
      if (++n >= limit) break;
    }
    cursor = page.body.cursor as number;
  }
  return EXIT.ok;
}

async function stats(s: ClientSettings, f: DlqFlags, io: CliIo): Promise<number> {
  const { body } = await call(s, 'GET', `/dlq/stats${query({ since: f.since })}`);
  if (f.json) io.out(JSON.stringify(body, null, 2));
  else {
    const since =
      typeof body.since === 'string'
        ? `since ${when(body.since)}`
        : f.since
          ? `since ${f.since}`
          : 'in DLQ';
    io.out(
      `${String(body.total)} dead letters ${since}\n` +
        table(['REASON', 'COUNT'], Object.entries(body.reasons as Record<string, number>)),
    );
  }
  return EXIT.ok;
}

/** The request body of `replay`: --seq n[,n…], or --reason/--rule with --since/--until/--limit. */
function replayBody(f: DlqFlags): Record<string, unknown> {
  const dryRun = f['dry-run'] === true ? { dryRun: true } : {};
  if (f.seq !== undefined) {
    if ([f.reason, f.rule, f.since, f.until, f.after].some((x) => x !== undefined))
      throw new CliError(EXIT.usage, 'give --seq or --reason/--rule, not both');
    const seqs = f.seq.split(',').map((x) => Number(x.trim()));
    if (!seqs.every((n) => Number.isSafeInteger(n) && n > 0))
      throw new CliError(EXIT.usage, '--seq takes DLQ sequences: --seq 12 or --seq 12,13,20');
    return { seqs, ...dryRun };
  }
  if (f.reason === undefined && f.rule === undefined)
    throw new CliError(
      EXIT.usage,
      'name what to replay: --seq n[,n…], or --reason r [--rule id] [--since t] [--until t]',
    );
  const limit = positive(f.limit, '--limit');
  return {
    ...(f.reason === undefined ? {} : { reason: f.reason }),
    ...(f.rule === undefined ? {} : { rule: f.rule }),
    ...(f.since === undefined ? {} : { since: f.since }),
    ...(f.until === undefined ? {} : { until: f.until }),
    ...(f.after === undefined ? {} : { after: f.after }),
    ...(limit === undefined ? {} : { limit }),
    ...dryRun,
  };
}

/** Puts dead letters back on their source subjects; exit 1 when one could not go back. */
async function replay(s: ClientSettings, f: DlqFlags, io: CliIo): Promise<number> {
  const { body } = await call(s, 'POST', '/dlq/replay', replayBody(f));
  const r = body as {
    dryRun: boolean;
    selected: number;
    replayed: number;
    duplicates: number;
    failed: number;
    wouldReplay: number;
    more: boolean;
    cursor: number;
    results: { seq: number; outcome: string; reason?: string; error?: string }[];
  };
  if (f.json) io.out(JSON.stringify(r, null, 2));
  else {
    const head =
      r.selected === 0
        ? 'no dead letters match'
        : r.dryRun
          ? `dry run: ${r.wouldReplay} of ${r.selected} would go back to their source subjects, ${r.failed} cannot`
          : `${r.replayed} of ${r.selected} went back to their source subjects; ${r.duplicates} already replayed (duplicates, not sent again); ${r.failed} failed`;
    const failures = r.results
      .filter((x) => x.outcome === 'failed')
      .map((x) => `  #${x.seq} ${x.reason ?? ''}: ${x.error ?? ''}`);
    const more = r.more
      ? [
          `(more letters match: go on with --after ${r.cursor}, the last DLQ sequence this one covered, or raise --limit)`,
        ]
      : [];
    io.out([head, ...failures, ...more].join('\n'));
  }
  return r.failed > 0 ? EXIT.invalid : EXIT.ok;
}

/** `vigil dlq …` */
export async function dlq(s: ClientSettings, f: DlqFlags, p: string[], io: CliIo): Promise<number> {
  const sub = arg(p, 1, 'dlq command (tail, stats, replay)');
  switch (sub) {
    case 'tail':
      return tail(s, f, io);
    case 'stats':
      return stats(s, f, io);
    case 'replay':
      return replay(s, f, io);
    default:
      throw new CliError(EXIT.usage, `unknown dlq command "${sub}"; try: tail, stats, replay`);
  }
}
