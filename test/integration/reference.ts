import { createPartition, emptyRuleSet, processRecord } from '../../rules/index.js';
import { classifyRecord, foldVersions } from '../../protocol/index.js';
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
    const p = Number(m.subject.slice(m.subject.lastIndexOf('.') + 1));
    const st = states[p];
    if (st === undefined) continue;
    const c = classifyRecord(m.subject, m.data, p, partitions);
    let out;
    if (c.kind === 'marker') {
      const target = versions.get(c.controlSeq);
      if (target === undefined || c.controlSeq <= st.ruleSet.controlSeq) continue;
      out = processRecord(st, { kind: 'marker', seq: m.seq, ruleSet: target });
    } else if (c.kind === 'tick')
      out = processRecord(st, { kind: 'tick', seq: m.seq, ts: c.ts, storedAt: m.storedAt });
    else if (c.kind === 'event')
      out = processRecord(st, {
        kind: 'event',
        seq: m.seq,
        key: c.key,
        data: m.data,
        publishTs: m.storedAt,
      });
    else continue;
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
