/**
 * Numbers for state lineages (`ruleId@epoch`) within this thread, so that a partition's keyed
 * state can be indexed by two numbers (see `keyed-states.ts`) and a hit need not hash a string.
 * A lineage keeps its number for the thread's life; there are as many as rule versions that
 * started a lineage, a few thousand at most. Numbers never leave the thread: checkpoints name
 * lineages by their own numbering (`LineageIndex`).
 */
const numbers = new Map<string, number>();
const names: string[] = [];

/** The lineage's number, given one if it has none. */
export function lineageNumber(sid: string): number {
  let n = numbers.get(sid);
  if (n === undefined) {
    n = names.length;
    names.push(sid);
    numbers.set(sid, n);
  }
  return n;
}

/** The lineage numbered `n`. */
export function lineageOf(n: number): string {
  return names[n] as string;
}
