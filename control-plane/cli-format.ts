/** Human-readable output of `vigil`: aligned tables and condition trees. */

/** An aligned table with a header row; cells are stringified, `null`/`undefined` shown as `-`. */
export function table(headers: readonly string[], rows: readonly (readonly unknown[])[]): string {
  const cells = rows.map((r) =>
    r.map((c) => (c === undefined || c === null || c === '' ? '-' : String(c))),
  );
  const widths = headers.map((h, i) =>
    Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)),
  );
  const line = (r: readonly string[]) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...cells.map(line)].join('\n');
}

const short = (v: unknown): string => {
  const s = JSON.stringify(v);
  return s === undefined ? 'undefined' : s.length > 60 ? `${s.slice(0, 57)}...` : s;
};

/** A condition tree as explained by the API, one line per node, with each leaf's value and result. */
export function conditionTree(node: unknown, indent = ''): string[] {
  const n = node as Record<string, unknown>;
  const mark = n.result === true ? '✓' : n.result === false ? '✗' : '·';
  for (const op of ['all', 'any'] as const) {
    if (Array.isArray(n[op]))
      return [
        `${indent}${mark} ${op}`,
        ...(n[op] as unknown[]).flatMap((c) => conditionTree(c, `${indent}  `)),
      ];
  }
  if (n.not !== undefined) return [`${indent}${mark} not`, ...conditionTree(n.not, `${indent}  `)];
  const path = typeof n.path === 'string' ? n.path.slice(1) : '';
  const evaluated = 'factResult' in n || 'result' in n || 'error' in n;
  const detail =
    typeof n.error === 'string'
      ? `  error: ${n.error}`
      : evaluated
        ? `  (fact = ${short(n.factResult)})`
        : '  (not evaluated)';
  return [
    `${indent}${mark} ${String(n.fact)}${path} ${String(n.operator)} ${short(n.value)}${detail}`,
  ];
}
