import { describe, expect, it } from 'vitest';
import { withoutTsx } from '../../service/threads/worker-launch.js';

// Compiled worker threads of a process started with tsx get the parent's options without it.

describe('withoutTsx', () => {
  it('drops tsx in each form it is given, and keeps every other option in order', () => {
    expect(withoutTsx(['--import', 'tsx'])).toEqual([]);
    expect(withoutTsx(['--enable-source-maps', '--import=tsx', '--no-warnings'])).toEqual([
      '--enable-source-maps',
      '--no-warnings',
    ]);
    expect(withoutTsx(['--loader', 'tsx/esm', '-r', 'tsx/cjs', '--import', './apm.mjs'])).toEqual([
      '--import',
      './apm.mjs',
    ]);
    expect(withoutTsx(['--experimental-loader=tsx', '--inspect'])).toEqual(['--inspect']);
  });

  it('answers undefined when there is no tsx, so that the workers inherit the options as they are', () => {
    expect(withoutTsx([])).toBeUndefined();
    expect(
      withoutTsx(['--enable-source-maps', '--import', 'tsx-like', '--import=./tsx.mjs']),
    ).toBeUndefined();
  });
});
