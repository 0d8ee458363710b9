import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES, ErrorCode, VigilError } from '../../rules/index.js';
import { ServiceError, ServiceErrorCode } from '../../service/index.js';
import { ApiError, ApiErrorCode } from '../../control-plane/index.js';
import { CliError, EXIT } from '../../control-plane/cli-client.js';
import { CODE_FOLDERS, sourceFiles } from '../../scripts/source-files.mjs';

const root = join(import.meta.dirname, '..', '..');

/** The rows of the table in docs/operations.md "Error codes": code → [where, retry helps]. */
function documented(): Map<string, [string, string]> {
  const doc = readFileSync(join(root, 'docs', 'operations.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## Error codes'));
  const rows = new Map<string, [string, string]>();
  for (const m of section.matchAll(/^\| `(VIGIL_E_[A-Z_]+)` +\| (\w+) +\| ([\w ]+?) +\|/gm))
    rows.set(m[1]!, [m[2]!, m[3]!]);
  return rows;
}

describe('the error-code catalogue', () => {
  it('names each code once, as its value', () => {
    expect(Object.keys(ERROR_CODES).sort()).toEqual(Object.values(ErrorCode).sort());
  });

  it('is the table of docs/operations.md, row for row', () => {
    const rows = documented();
    const word = (r: boolean | 'depends'): string =>
      r === 'depends' ? 'depends' : r ? 'yes' : 'no';
    expect([...rows.keys()].sort()).toEqual(Object.keys(ERROR_CODES).sort());
    for (const [code, info] of Object.entries(ERROR_CODES))
      expect(rows.get(code), code).toEqual([info.layer, word(info.retryable)]);
  });

  it('holds every code the sources raise', () => {
    const used = new Set<string>();
    for (const folder of [...CODE_FOLDERS, 'scripts'])
      for (const f of sourceFiles(join(root, folder)))
        for (const m of readFileSync(f, 'utf8').matchAll(/VIGIL_E_[A-Z_]+/g)) used.add(m[0]);
    const unknown = [...used].filter((c) => !Object.hasOwn(ERROR_CODES, c));
    expect(unknown).toEqual([]);
  });

  it('gives each layer its codes from the catalogue and its default retryability', () => {
    for (const c of [...Object.values(ServiceErrorCode), ...Object.values(ApiErrorCode)])
      expect(ERROR_CODES[c]).toBeDefined();
    expect(ServiceErrorCode.Config).toBe('VIGIL_E_CONFIG');
    expect(Object.keys(ApiErrorCode)).toHaveLength(13);
    expect(new VigilError(ErrorCode.Timeout, 'x').retryable).toBe(true);
    expect(new VigilError(ErrorCode.Timeout, 'x', { retryable: false }).retryable).toBe(false);
    expect(new ServiceError(ServiceErrorCode.Nats, 'x').retryable).toBe(false); // 'depends'
    expect(new ServiceError(ServiceErrorCode.StreamConfig, 'x').retryable).toBe(false);
    expect(new ApiError(ApiErrorCode.Unavailable, 'x').retryable).toBe(true);
    expect(new ApiError(ApiErrorCode.Conflict, 'x').retryable).toBe(false);
  });

  it('makes a CLI failure a VigilError with the API code behind it, else its exit code’s', () => {
    const fromApi = new CliError(EXIT.conflict, 'stale', {
      error: { code: 'VIGIL_E_PRECONDITION_FAILED' },
    });
    expect(fromApi).toBeInstanceOf(VigilError);
    expect(fromApi.code).toBe('VIGIL_E_PRECONDITION_FAILED');
    expect(new CliError(EXIT.usage, 'bad flag').code).toBe('VIGIL_E_USAGE');
    const down = new CliError(EXIT.unavailable, 'no service');
    expect([down.code, down.retryable]).toEqual(['VIGIL_E_UNAVAILABLE', true]);
    expect(new CliError(EXIT.usage, 'x', { error: { code: 'NOT_OURS' } }).code).toBe(
      'VIGIL_E_USAGE',
    );
  });
});
