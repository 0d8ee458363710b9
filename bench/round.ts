/** `x` rounded to `digits` decimal places, for the figures benchmarks print. */
export function round(x: number, digits = 1): number {
  return Math.round(x * 10 ** digits) / 10 ** digits;
}
