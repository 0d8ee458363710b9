/** `--name N` from the command line, a positive integer; `fallback` when not given. */
export function positiveArg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? Number(process.argv[i + 1]) : fallback;
  if (!Number.isSafeInteger(v) || v < 1) throw new Error(`--${name} must be a positive integer`);
  return v;
}
