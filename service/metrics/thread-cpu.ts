import { readFileSync } from 'node:fs';
import { Counter, type Registry } from 'prom-client';

/** Clock ticks a second of Linux's /proc times (USER_HZ, 100 on every architecture Node runs on). */
const USER_HZ = 100;

/**
 * CPU seconds (user + system) the calling thread has used, from Linux's /proc/thread-self/stat;
 * undefined where there is none. `process.cpuUsage()` is the whole process's, in a worker thread
 * too: this is the one figure that says what one worker costs.
 */
export function threadCpuSeconds(): number | undefined {
  let stat: string;
  try {
    stat = readFileSync('/proc/thread-self/stat', 'latin1');
  } catch {
    return undefined;
  }
  // The command name, in parentheses, may hold spaces: the fields that follow it are counted
  // from its closing parenthesis (utime and stime are fields 14 and 15).
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return Number.isFinite(utime) && Number.isFinite(stime) ? (utime + stime) / USER_HZ : undefined;
}

/**
 * `vigil_worker_cpu_seconds_total{worker}`: the CPU the worker thread that registers it has used,
 * read at scrape time (with 10 ms resolution). Not registered where /proc has no per-thread times.
 */
export function registerThreadCpu(registry: Registry, worker: string): void {
  if (threadCpuSeconds() === undefined) return;
  let counted = 0;
  new Counter({
    name: 'vigil_worker_cpu_seconds_total',
    help: 'CPU time (user and system) used by each worker thread since it started',
    labelNames: ['worker'],
    registers: [registry],
    collect() {
      const now = threadCpuSeconds();
      if (now === undefined || now <= counted) return;
      this.inc({ worker }, now - counted);
      counted = now;
    },
  });
}
