import {
  createDownstream,
  createPartition,
  emptyRuleSet,
  processRecord,
  type PartitionRecord,
  type RuleSet,
} from '../../rules/index.js';
import {
  downstreamRecord,
  foldVersions,
  partitionOf,
  partitionRecord,
} from '../../protocol/index.js';
import type { RunningService } from '../../service/index.js';
import { eventually, partitionGauge, readStream, type TestServers } from './servers.js';

/** A downstream partition's record before its log gives it a position. */
type HopRecord =
  Extract<PartitionRecord, { kind: 'forward' | 'report' }> extends infer T
    ? T extends unknown
      ? Omit<T, 'seq'>
      : never
    : never;

/**
 * The single-threaded reference: every partition's log through the rules core, each change
 * applied at its marker. With `rekey` (the service's settings), what the partitions send the key
 * spaces' partitions goes through those, each source's messages in its order, one source after
 * another (any interleaving gives the same alerts: `test/rules/rekey.test.ts`). Returns the ids of
 * the alerts a crash-free run produces.
 */
export async function referenceAlertIds(
  servers: TestServers,
  partitions: number,
  outOfOrderMs: number,
  rekey?: { readonly partitionKey: readonly string[]; readonly reportEveryMs: number },
): Promise<Set<string>> {
  const versions = foldVersions(await readStream(servers, 'CONTROL'));
  const hop = rekey && { ...rekey, partitions, partitionOf };
  const states = Array.from({ length: partitions }, (_, p) =>
    createPartition(emptyRuleSet(), {
      partition: p,
      outOfOrderMs,
      ...(hop === undefined ? {} : { rekey: hop }),
    }),
  );
  // Per key space, per downstream partition, per source: the messages in the source's order.
  const sent = new Map<string, HopRecord[][][]>();
  const ruleSet = (c: number): RuleSet => {
    const rs = versions.get(c);
    if (rs === undefined) throw new Error(`no rule set at control sequence ${c}`);
    return rs;
  };
  const ids = new Set<string>();
  for (const m of await readStream(servers, 'EVENTS')) {
    const r = partitionRecord(
      m,
      partitions,
      (c) => versions.get(c),
      (p) => states[p]?.ruleSet.controlSeq ?? 0,
    );
    const st = r === undefined ? undefined : states[r.partition];
    if (r === undefined || st === undefined) continue;
    const out = processRecord(st, r.record);
    for (const a of out.alerts) ids.add(a.id);
    for (const x of out.sent) {
      let q = sent.get(x.space);
      if (q === undefined)
        sent.set(
          x.space,
          (q = Array.from({ length: partitions }, () =>
            Array.from({ length: partitions }, (): HopRecord[] => []),
          )),
        );
      const src = r.partition;
      q[x.partition]?.[src]?.push(
        // Its position is given when its partition reads it.
        downstreamRecord(src, x, 0, ruleSet(x.controlSeq)),
      );
    }
  }
  for (const [space, perPartition] of sent)
    perPartition.forEach((perSource, p) => {
      const st = createDownstream(emptyRuleSet(), { partition: p, space, sources: partitions });
      let seq = 0;
      for (const list of perSource)
        for (const rec of list)
          for (const a of processRecord(st, { ...rec, seq: ++seq } as PartitionRecord).alerts)
            ids.add(a.id);
    });
  return ids;
}

/** The highest EVENTS sequence of each partition. */
export async function partitionHeads(servers: TestServers, partitions: number): Promise<number[]> {
  const heads = new Array<number>(partitions).fill(0);
  for (const m of await readStream(servers, 'EVENTS')) {
    const p = Number(m.subject.split('.')[2]);
    if (p < partitions) heads[p] = Math.max(heads[p] ?? 0, m.seq);
  }
  return heads;
}

/**
 * Waits until the service at `url` (or the processes at `urls`, which share the partitions) has
 * read every message in REKEY (each key space's partition `p~space` in vigil_partition_offset),
 * REKEY having stopped growing: the partitions may still be sending what they read last.
 */
export async function rekeyCaughtUp(
  servers: TestServers,
  urls: string | readonly string[],
  timeoutMs = 60_000,
): Promise<void> {
  let last = -1;
  await eventually(
    async () => {
      const texts = await Promise.all(
        [urls].flat().map(async (url) => (await fetch(`${url}/metrics`)).text()),
      );
      const lines = texts.flatMap((t) => t.split('\n'));
      const messages = await readStream(servers, 'REKEY');
      const heads = new Map<string, number>();
      for (const m of messages) {
        const [, space, p] = m.subject.split('.');
        heads.set(`${p}~${space}`, m.seq);
      }
      const steady = messages.length === last;
      last = messages.length;
      return (
        steady &&
        [...heads].every(([label, head]) =>
          lines.some(
            (l) =>
              l.startsWith(`vigil_partition_offset{partition="${label}"}`) &&
              Number(l.slice(l.lastIndexOf(' ') + 1)) >= head,
          ),
        )
      );
    },
    timeoutMs,
    "the key spaces' partitions to read all of REKEY",
  );
}

/**
 * Waits until the service processes `procs` (sharing the partitions) have read every record now in
 * each partition of EVENTS, then all of REKEY: what a process counts is what it read since its
 * start, so done means at the heads of the logs.
 */
export async function processesCaughtUp(
  servers: TestServers,
  procs: readonly { readonly url: string; offsets(): Promise<number[]> }[],
  partitions: number,
  what: string,
  timeoutMs = 60_000,
): Promise<void> {
  const heads = await partitionHeads(servers, partitions);
  await eventually(
    async () => {
      const offsets = await Promise.all(procs.map((x) => x.offsets()));
      return heads.every((h, p) => Math.max(...offsets.map((o) => o[p] ?? 0)) >= h);
    },
    timeoutMs,
    what,
  );
  await rekeyCaughtUp(
    servers,
    procs.map((x) => x.url),
    timeoutMs,
  );
}

/** Waits until the service has processed every record now in each partition (vigil_partition_offset). */
export async function caughtUp(
  servers: TestServers,
  service: RunningService,
  partitions: number,
  timeoutMs = 30_000,
): Promise<void> {
  const heads = await partitionHeads(servers, partitions);
  await eventually(
    async () => {
      const offsets = await partitionGauge(service, 'vigil_partition_offset', partitions);
      return heads.every((h, p) => (offsets[p] ?? 0) >= h);
    },
    timeoutMs,
    'every partition to catch up',
  );
}
