const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;

/**
 * Parses a duration: a non-negative integer of milliseconds, or a string such as `500ms`, `30s`,
 * `10m`, `1.5h`, `7d`. Returns `undefined` when the value is not a duration.
 */
export function parseDuration(value: unknown): number | undefined {
  if (typeof value === 'number')
    return Number.isSafeInteger(value) && value >= 0 ? value : undefined;
  if (typeof value !== 'string') return undefined;
  const m = DURATION.exec(value.trim());
  if (!m || m[1] === undefined || m[2] === undefined) return undefined;
  const ms = Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
  return Number.isSafeInteger(ms) ? ms : undefined;
}
