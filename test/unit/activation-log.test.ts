import { describe, expect, it } from 'vitest';
import { ActivationLog } from '../../service/index.js';

describe('ActivationLog', () => {
  it('keeps the sequence in force per partition and the slowest partition per change', () => {
    const log = new ActivationLog();
    log.record(0, 5, 12);
    log.record(1, 5, 40);
    log.record(1, 4, 3); // a late report of an older marker does not go back
    expect(log.appliedAt(1)).toBe(5);
    expect(log.activation(5)).toEqual({ controlSeq: 5, partitions: 2, maxMs: 40 });
    expect(log.activation(4)).toEqual({ controlSeq: 4, partitions: 1, maxMs: 3 });
    expect(log.partitionTimes(5)).toEqual([
      [0, 12],
      [1, 40],
    ]);
    expect(log.partitionTimes(6)).toEqual([]);
    log.forget(1);
    expect(log.appliedAt(1)).toBeUndefined();
    expect(log.appliedAt(0)).toBe(5);
  });

  it('forgets the oldest changes beyond its size', () => {
    const log = new ActivationLog(3);
    for (let seq = 1; seq <= 5; seq++) log.record(0, seq, seq);
    expect(log.activations().map((a) => a.controlSeq)).toEqual([3, 4, 5]);
    expect(log.activation(1)).toBeUndefined();
  });
});
