/**
 * Sums up V8's `--trace-gc-nvp` output per thread (isolate): the scavenges' count, pause p50 / p90 /
 * max, bytes surviving each (p50 / max) and how fast the long ones (≥ 10 ms) copied them. For a
 * benchmark run with the flag, whose worker threads share the process's V8 flags:
 *
 *   node --trace-gc-nvp --import tsx bench/e2e-bench.ts --no-checkpoint-compare > /tmp/gc.log 2>&1
 *   node --import tsx bench/gc-trace.ts /tmp/gc.log
 *
 * Threads with fewer than 5 scavenges are left out. One JSON object a thread.
 */
import { readFileSync } from 'node:fs';
import { round } from './round.js';

const file = process.argv[2];
if (file === undefined)
  throw new Error('usage: bench/gc-trace.ts <file with --trace-gc-nvp output>');
const text = readFileSync(file, 'latin1');
const byIsolate = new Map<string, { pause: number; survived: number }[]>();
// A record starts with `[pid:isolate]`, a time, `ms:`, then `name=value` pairs (which other output may split).
for (const m of text.matchAll(/\[\d+:(0x[0-9a-f]+)\][\s\d.]*ms: (pause=[\s\S]*?)(?=\[\d+:0x|$)/g)) {
  const fields = new Map(
    [...(m[2] as string).matchAll(/([\w.]+)=([\w.%-]+)/g)].map((f) => [f[1], f[2]]),
  );
  if (fields.get('gc') !== 's') continue;
  const list = byIsolate.get(m[1] as string) ?? [];
  list.push({
    pause: Number(fields.get('pause')),
    survived: Number(fields.get('new_space_survived') ?? 0),
  });
  byIsolate.set(m[1] as string, list);
}
const at = (xs: readonly number[], q: number): number =>
  xs[Math.min(xs.length - 1, Math.floor(q * xs.length))] ?? NaN;
for (const [isolate, xs] of byIsolate) {
  if (xs.length < 5) continue;
  const pauses = xs.map((x) => x.pause).sort((a, b) => a - b);
  const survived = xs.map((x) => x.survived / 1e6).sort((a, b) => a - b);
  const long = xs.filter((x) => x.pause >= 10);
  const longMs = long.reduce((a, x) => a + x.pause, 0);
  console.log(
    JSON.stringify({
      isolate,
      scavenges: xs.length,
      pauseP50Ms: round(at(pauses, 0.5)),
      pauseP90Ms: round(at(pauses, 0.9)),
      pauseMaxMs: round(at(pauses, 1)),
      survivedP50Mb: round(at(survived, 0.5)),
      survivedMaxMb: round(at(survived, 1)),
      longCopiedMbPerMs:
        longMs === 0 ? null : round(long.reduce((a, x) => a + x.survived, 0) / 1e6 / longMs, 2),
    }),
  );
}
