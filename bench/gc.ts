import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * `global.gc`, exposed at run time when node was not started with `--expose-gc`: the benchmarks
 * collect before each heap reading, and `npm run bench:*` starts them without the flag.
 */
export function exposedGc(): () => void {
  const g = (globalThis as { gc?: () => void }).gc;
  if (typeof g === 'function') return g;
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}
