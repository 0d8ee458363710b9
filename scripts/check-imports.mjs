// Fails when the import graph of our TypeScript has a cycle (run by `npm run lint`). ESLint's
// no-restricted-imports keeps each folder to the layers below it; this catches the cycles inside a
// folder that a layer rule cannot see. Plain JavaScript so that it runs without tsx.
import { readFileSync, existsSync } from 'node:fs';
import { dirname, relative, resolve } from 'node:path';
import { CODE_FOLDERS, sourceFiles } from './source-files.mjs';

const ROOTS = [...CODE_FOLDERS, 'scripts', 'bench', 'test'];
const SPEC =
  /(?:^|\n)\s*(?:import|export)\b[^'"]*?\bfrom\s+['"](\.\.?\/[^'"]+)['"]|\bimport\(\s*['"](\.\.?\/[^'"]+)['"]\s*\)/g;

/** The file a relative specifier names: `./x.js` is `./x.ts` in the sources. */
function target(from, spec) {
  const p = resolve(dirname(from), spec);
  if (existsSync(p)) return p;
  const ts = p.replace(/\.js$/, '.ts');
  return existsSync(ts) ? ts : undefined;
}

const files = ROOTS.filter((r) => existsSync(r))
  .flatMap((r) => sourceFiles(r, /\.(ts|mjs)$/))
  .map((f) => resolve(f));
const edges = new Map(
  files.map((f) => {
    const text = readFileSync(f, 'utf8');
    const to = [...text.matchAll(SPEC)]
      .map((m) => target(f, m[1] ?? m[2]))
      .filter((t) => t !== undefined);
    return [f, [...new Set(to)]];
  }),
);

// Tarjan's strongly connected components: any component of two or more files is a cycle.
let index = 0;
const idx = new Map();
const low = new Map();
const stack = [];
const on = new Set();
const cycles = [];
function visit(v) {
  idx.set(v, index);
  low.set(v, index++);
  stack.push(v);
  on.add(v);
  for (const w of edges.get(v) ?? []) {
    if (!idx.has(w)) {
      visit(w);
      low.set(v, Math.min(low.get(v), low.get(w)));
    } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
  }
  if (low.get(v) === idx.get(v)) {
    const scc = [];
    let w;
    do {
      w = stack.pop();
      on.delete(w);
      scc.push(w);
    } while (w !== v);
    if (scc.length > 1 || (edges.get(v) ?? []).includes(v)) cycles.push(scc);
  }
}
for (const f of files) if (!idx.has(f)) visit(f);

if (cycles.length > 0) {
  for (const c of cycles)
    console.error(`import cycle: ${c.map((f) => relative(process.cwd(), f)).join(' <-> ')}`);
  console.error('Break each cycle: move what both sides need into a file both import.');
  process.exit(1);
}
console.log(`[vigil] imports: ${files.length} files, no cycle`);
