// The project's code folders and a walk over their files, shared by the build, the import-cycle
// check and the tests that read the sources. Plain JavaScript so that it runs without tsx.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

/** The code folders, lowest layer first (each imports only those before it). */
export const CODE_FOLDERS = ['rules', 'protocol', 'jetstream', 'service', 'control-plane', 'app'];

/**
 * The files below `dir` whose names match `pattern` (TypeScript by default), declaration files
 * left out.
 * @param {string} dir
 * @param {RegExp} [pattern]
 * @returns {string[]}
 */
export function sourceFiles(dir, pattern = /\.ts$/) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path, pattern);
    return pattern.test(e.name) && !e.name.endsWith('.d.ts') ? [path] : [];
  });
}
