/** The `vigil` process: runs one command and exits with its code. */
import { runCli } from './cli.js';

const abort = new AbortController();
process.once('SIGINT', () => abort.abort());
const code = await runCli(process.argv.slice(2), {
  out: (t) => process.stdout.write(`${t}\n`),
  err: (t) => process.stderr.write(`${t}\n`),
  env: process.env,
  cwd: process.cwd(),
  signal: abort.signal,
  ...(process.stderr.isTTY
    ? { progress: (t: string) => process.stderr.write(`\r\x1b[K${t}`) }
    : {}),
}).catch((e: unknown) => {
  process.stderr.write(`vigil: ${e instanceof Error ? e.message : String(e)}\n`);
  // After Ctrl-C whatever failed failed because of it: 130, as a shell reports an interrupt.
  return abort.signal.aborted ? 130 : 6;
});
process.exitCode = code;
