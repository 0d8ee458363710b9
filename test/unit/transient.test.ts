import { describe, expect, it } from 'vitest';
import { errors } from '@nats-io/transport-node';
import { ServiceError } from '../../service/index.js';
import { backoffMs, isTransient, retryTransient } from '../../service/transient.js';

/** An attempt that fails with the given errors in turn, then returns `value`. */
function failing<T>(errs: unknown[], value: T): { attempt: () => Promise<T>; calls: () => number } {
  let calls = 0;
  return {
    attempt: async () => {
      const err = errs[calls++];
      if (err !== undefined) throw err;
      return value;
    },
    calls: () => calls,
  };
}

describe('isTransient', () => {
  it('holds for a NATS timeout or lost connection and for retryable Vigil errors only', () => {
    expect(isTransient(new errors.TimeoutError())).toBe(true);
    expect(isTransient(new errors.ConnectionError('closed'))).toBe(true);
    expect(isTransient(new errors.RequestError('no responders'))).toBe(true);
    expect(isTransient(new ServiceError('VIGIL_E_NATS', 'away', { retryable: true }))).toBe(true);
    expect(isTransient(new ServiceError('VIGIL_E_CONFIG', 'bad', { retryable: false }))).toBe(
      false,
    );
    expect(isTransient(new errors.InvalidArgumentError('bad'))).toBe(false);
    expect(isTransient(new Error('Connection is closed.'))).toBe(true);
    expect(isTransient(new TypeError('x is undefined'))).toBe(false);
    expect(isTransient('timeout')).toBe(false);
  });
});

describe('retryTransient', () => {
  it('tries again after transient failures, with doubling delays, and returns the result', async () => {
    const f = failing([new errors.TimeoutError(), new errors.TimeoutError()], 'opened');
    const retries: [number, number][] = [];
    const got = await retryTransient(f.attempt, {
      abandoned: () => false,
      onRetry: (_err, n, delayMs) => retries.push([n, delayMs]),
      firstDelayMs: 1,
    });
    expect(got).toBe('opened');
    expect(f.calls()).toBe(3);
    expect(retries).toEqual([
      [1, 1],
      [2, 2],
    ]);
  });

  it('throws a failure retrying cannot help at once', async () => {
    const bad = new TypeError('a bug');
    const f = failing([bad], 'never');
    await expect(
      retryTransient(f.attempt, { abandoned: () => false, onRetry: () => {}, firstDelayMs: 1 }),
    ).rejects.toBe(bad);
    expect(f.calls()).toBe(1);
  });

  it('gives up with undefined once abandoned, whatever the failure', async () => {
    let dropped = false;
    const f = failing([new errors.TimeoutError(), new TypeError('late')], 'never');
    const got = await retryTransient(f.attempt, {
      abandoned: () => dropped,
      onRetry: () => (dropped = true),
      firstDelayMs: 1,
    });
    expect(got).toBeUndefined();
    expect(f.calls()).toBe(1);
  });

  it('caps the delay', async () => {
    const f = failing(
      Array.from({ length: 6 }, () => new errors.TimeoutError()),
      1,
    );
    const delays: number[] = [];
    await retryTransient(f.attempt, {
      abandoned: () => false,
      onRetry: (_e, _n, d) => delays.push(d),
      firstDelayMs: 1,
      maxDelayMs: 4,
    });
    expect(delays).toEqual([1, 2, 4, 4, 4, 4]);
  });
});

describe('backoffMs', () => {
  it('doubles from the first wait and stops at the cap', () => {
    expect([0, 1, 2, 3, 4, 5, 6].map((a) => backoffMs(a, 50, 2000))).toEqual([
      50, 100, 200, 400, 800, 1600, 2000,
    ]);
  });
});
