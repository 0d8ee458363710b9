import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { parseArgs } from 'node:util';
import { CliError, EXIT } from './cli-client.js';

/** Where the CLI writes and what it reads: the process, or a test. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  readonly env: NodeJS.ProcessEnv;
  readonly cwd: string;
  /** Ends `alerts tail` and cancels a `backtest` (Ctrl-C in the process). */
  readonly signal?: AbortSignal;
  /** Redraws a progress line (a terminal's stderr); absent: no progress shown. */
  progress?(text: string): void;
}

export const OPTIONS = {
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
  config: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

export type Flags = ReturnType<
  typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>
>['values'];

/** Prints an answer: its JSON body with `--json`, else what `human` makes of it. */
export function printer(f: Flags, io: CliIo): (body: unknown, human: () => string) => void {
  return (body, human) => io.out(f.json ? JSON.stringify(body, null, 2) : human());
}

export function readJsonFiles(
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
export function rulesIn(files: { file: string; value: unknown }[]): Record<string, unknown>[] {
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

export const arg = (positionals: string[], i: number, what: string): string => {
  const v = positionals[i];
  if (v === undefined) throw new CliError(EXIT.usage, `name the ${what}`);
  return v;
};

export const when = (iso: unknown): string =>
  typeof iso === 'string' ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '-';

export const ifMatch = (f: Flags): Record<string, string> => {
  const h: Record<string, string> = {};
  if (f.expect !== undefined) h['if-match'] = `"${f.expect}"`;
  if (f.reason !== undefined) h['x-vigil-reason'] = f.reason;
  return h;
};
