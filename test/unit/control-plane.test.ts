import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  allows,
  ApiError,
  jsonDiff,
  resolveControlPlaneOptions,
  TokenAuth,
} from '../../control-plane/index.js';
import { DEFAULT_LIMITS, ValidationError } from '../../rules/index.js';

const service = {
  natsUrl: 'nats://127.0.0.1:4222',
  limits: DEFAULT_LIMITS,
  partitions: 16,
  outOfOrderMs: 1000,
};
const secret = (c: string) => c.repeat(20);

describe('control plane options', () => {
  it('reads tokens from VIGIL_API_TOKENS and VIGIL_API_TOKENS_FILE, with documented defaults', () => {
    const dir = mkdtempSync(join(tmpdir(), 'vigil-cp-'));
    try {
      const file = join(dir, 'tokens.json');
      writeFileSync(file, JSON.stringify([{ name: 'grafana', role: 'read', token: secret('g') }]));
      const o = resolveControlPlaneOptions(
        service,
        {},
        {
          VIGIL_API_TOKENS: `ops:admin:${secret('a')}, ci:write:${secret('b')}`,
          VIGIL_API_TOKENS_FILE: file,
        },
      );
      expect(o.tokens.map((t) => `${t.name}:${t.role}`)).toEqual([
        'ops:admin',
        'ci:write',
        'grafana:read',
      ]);
      expect(o.maxBodyBytes).toBe(1024 * 1024);
      expect(o.maxModelBytes).toBe(DEFAULT_LIMITS.maxControlBytes);
      expect(o.applyTimeoutMs).toBe(10_000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reports every bad token at once, by pointer', () => {
    let err: unknown;
    try {
      resolveControlPlaneOptions(
        service,
        {},
        {
          VIGIL_API_TOKENS: `ops:root:${secret('a')},x y:read:short,dup:read:${secret('c')},dup:write:${secret('c')}`,
        },
      );
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    const pointers = (err as ValidationError).problems.map((p) => p.pointer);
    expect(pointers).toEqual(
      expect.arrayContaining([
        '/VIGIL_API_TOKENS/0/role',
        '/VIGIL_API_TOKENS/1/name',
        '/VIGIL_API_TOKENS/1/token',
        '/tokens/3/name',
        '/tokens/3/token',
      ]),
    );
  });
});

describe('token auth', () => {
  const auth = new TokenAuth([
    { name: 'r', role: 'read', token: secret('r') },
    { name: 'w', role: 'write', token: secret('w') },
  ]);

  it('finds the principal of a bearer token and refuses anything else with 401', () => {
    expect(auth.authenticate(`Bearer ${secret('w')}`)).toEqual({ name: 'w', role: 'write' });
    expect(auth.authenticate(`bearer ${secret('r')}`)).toEqual({ name: 'r', role: 'read' });
    for (const h of [
      undefined,
      '',
      secret('w'),
      `Basic ${secret('w')}`,
      `Bearer ${secret('w')}x`,
      'Bearer ',
    ])
      expect(() => auth.authenticate(h)).toThrow(ApiError);
    try {
      auth.authenticate('Bearer nope');
    } catch (e) {
      expect((e as ApiError).status).toBe(401);
      expect((e as ApiError).code).toBe('VIGIL_E_UNAUTHORIZED');
    }
    expect(() => new TokenAuth([]).authenticate(`Bearer ${secret('w')}`)).toThrow(
      /no tokens configured/,
    );
  });

  it('orders roles read < write < admin', () => {
    expect(allows('admin', 'write')).toBe(true);
    expect(allows('write', 'write')).toBe(true);
    expect(allows('write', 'admin')).toBe(false);
    expect(allows('read', 'write')).toBe(false);
  });
});

describe('jsonDiff', () => {
  it('lists additions, removals and replacements by JSON pointer, key order ignored', () => {
    expect(jsonDiff({ a: 1, b: { c: [1, 2] } }, { b: { c: [1, 3, 4] }, a: 1 })).toEqual([
      { op: 'replace', path: '/b/c/1', before: 2, after: 3 },
      { op: 'add', path: '/b/c/2', after: 4 },
    ]);
    expect(jsonDiff({ 'x/y': 1, '~': 2 }, { '~': 2 })).toEqual([
      { op: 'remove', path: '/x~1y', before: 1 },
    ]);
    expect(jsonDiff(undefined, { a: 1 })).toEqual([{ op: 'add', path: '', after: { a: 1 } }]);
    expect(jsonDiff({ a: [1] }, { a: { 0: 1 } })).toEqual([
      { op: 'replace', path: '/a', before: [1], after: { 0: 1 } },
    ]);
    expect(jsonDiff({ a: null }, { a: null })).toEqual([]);
  });
});
