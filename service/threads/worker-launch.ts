import { existsSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import type { WorkerInit } from './worker-protocol.js';

/**
 * Where a worker thread starts. Compiled (dist/, what `npm start` runs) it is
 * the bundle dist/service/worker.js, found from the bundle that holds this module (dist/service/main.js,
 * dist/app/main.js, dist/scripts/start.js: each one folder below dist/) or from this module's own
 * compiled file (dist/service/threads/worker-launch.js, which `bench:e2e` loads through
 * dist/service/index.js). From the TypeScript sources (tests, `--import tsx`) it is
 * worker-entry.mjs, which registers the TypeScript loader in the thread (the main thread's loader
 * is not inherited), then loads worker.ts.
 */
const WORKER_ENTRY = import.meta.url.endsWith('.js')
  ? compiledWorker(import.meta.url)
  : new URL('./worker-entry.mjs', import.meta.url);

/** The worker's bundle, seen from a compiled module: the first of the two places that exists. */
function compiledWorker(from: string): URL {
  const places = [new URL('../service/worker.js', from), new URL('../worker.js', from)];
  return places.find((u) => existsSync(u)) ?? (places[0] as URL);
}

/**
 * Node options for compiled worker threads when the process was started with tsx (a test or a
 * bench that loads its own TypeScript and starts the compiled service): the parent's options
 * less tsx, which compiled workers have no use for and which cost each thread ~0.1 s of
 * start-up, every module resolved through the loader's hooks thread. Undefined otherwise: the
 * workers inherit the parent's options as they are.
 */
const WORKER_EXEC_ARGV = import.meta.url.endsWith('.js') ? withoutTsx(process.execArgv) : undefined;

/** `argv` without its tsx options; undefined when it has none. Exported for tests. */
export function withoutTsx(argv: readonly string[]): string[] | undefined {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    const isTsx = (x: string | undefined): boolean => x !== undefined && /^tsx(\/|$)/.test(x);
    if (['--import', '--loader', '--experimental-loader', '--require', '-r'].includes(a)) {
      if (isTsx(argv[i + 1])) {
        i++;
        continue;
      }
    } else if (/^--(import|loader|experimental-loader|require)=/.test(a)) {
      if (isTsx(a.slice(a.indexOf('=') + 1))) continue;
    }
    out.push(a);
  }
  return out.length === argv.length ? undefined : out;
}

/** Starts a worker thread with `init`, its young generation capped at `youngGenerationMb`. */
export function launchWorker(init: WorkerInit, youngGenerationMb: number): Worker {
  const options = {
    workerData: init,
    resourceLimits: { maxYoungGenerationSizeMb: youngGenerationMb },
  };
  try {
    return new Worker(
      WORKER_ENTRY,
      WORKER_EXEC_ARGV === undefined ? options : { ...options, execArgv: WORKER_EXEC_ARGV },
    );
  } catch (err) {
    // Given explicitly, options a worker cannot take (V8's, say) are refused, where inherited
    // they are not: then the workers keep tsx too.
    if ((err as { code?: string }).code !== 'ERR_WORKER_INVALID_EXEC_ARGV') throw err;
    return new Worker(WORKER_ENTRY, options);
  }
}
