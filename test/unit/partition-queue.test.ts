import { describe, expect, it } from 'vitest';
import { PartitionQueue } from '../../service/threads/partition-queue.js';

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => {};
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

const settle = () => new Promise((r) => setTimeout(r, 5));

describe('PartitionQueue', () => {
  it('runs the steps of one partition one after another, and partitions side by side', async () => {
    const q = new PartitionQueue(() => {});
    const ran: string[] = [];
    const start0 = deferred();
    q.run(0, async () => {
      ran.push('start 0');
      await start0.promise;
      ran.push('started 0');
    });
    q.run(0, async () => void ran.push('stop 0'));
    q.run(1, async () => void ran.push('start 1'));
    await settle();
    expect(ran).toEqual(['start 0', 'start 1']);
    expect(q.has(0)).toBe(true);
    expect(q.has(1)).toBe(false);
    start0.resolve();
    await q.settled();
    expect(ran).toEqual(['start 0', 'start 1', 'started 0', 'stop 0']);
    expect(q.has(0)).toBe(false);
  });

  it('logs a step that fails and still runs the next', async () => {
    const logged: string[] = [];
    const q = new PartitionQueue((level, m) => logged.push(`${level}: ${m.split('\n')[0]}`));
    const ran: string[] = [];
    q.run(3, () => Promise.reject(new Error('cannot open')));
    q.run(3, async () => void ran.push('stop 3'));
    await q.settled();
    await settle();
    expect(ran).toEqual(['stop 3']);
    expect(logged).toEqual(['error: partition 3: Error: cannot open']);
  });
});
