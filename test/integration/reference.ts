import { createPartition, emptyRuleSet, processRecord } from '../../rules/index.js';
import { foldVersions, partitionRecord } from '../../protocol/index.js';
import type { RunningService } from '../../service/index.js';
import { eventually, readStream, type TestServers } from './servers.js';

/**
 * The single-threaded reference: every partition's log through the rules core, each change
 * applied at its marker. Returns the ids of the alerts a crash-free run produces.
 */
export async function referenceAlertIds(
  servers: TestServers,
  partitions: number,
  outOfOrderMs: number,
): Promise<Set<string>> {
  const versions = foldVersions(await readStream(servers, 'CONTROL'));
  const states = Array.from({ length: partitions }, (_, p) =>
    createPartition(emptyRuleSet(), { partition: p, outOfOrderMs }),
  );
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
  }
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
      const lines = (await (await fetch(`${service.url}/metrics`)).text()).split('\n');
      return heads.every((h, p) => {
        const line = lines.find((l) => l.startsWith(`vigil_partition_offset{partition="${p}"}`));
        return (
          h === 0 || (line !== undefined && Number(line.slice(line.lastIndexOf(' ') + 1)) >= h)
        );
      });
    },
    timeoutMs,
    'every partition to catch up',
  );
}
