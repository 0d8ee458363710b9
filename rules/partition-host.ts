/** The operator host of a partition: what operators call to schedule timers and raise alerts, errors and overflows. */
import type { AlertDraft, KeyState, OperatorHost } from './cep/host.js';
import { alertId } from './alert.js';
import type { CompiledRule } from './compile-rule.js';
import { RuleEvaluationError } from './errors.js';
import { newResult, add, type PartitionState, type ProcessResult } from './partition-state.js';

/** The operator host of a partition, made once and pointed at each record's result. */
export interface Host extends OperatorHost {
  out: ProcessResult;
}
const hosts = new WeakMap<PartitionState, Host>();

export function hostFor(st: PartitionState, out: ProcessResult): Host {
  let h = hosts.get(st);
  if (h === undefined) hosts.set(st, (h = host(st)));
  h.out = out;
  return h;
}

function host(st: PartitionState): Host {
  // A downstream partition's alerts are named apart from the event log's partition of its number.
  const scope = st.down === undefined ? `${st.partition}` : `${st.partition}~${st.down.space}`;
  const h: Host = {
    out: newResult(),
    limits: st.limits,
    windows: st.windows,
    schedule(time, rule, key) {
      st.timers.push({ time, n: st.timerN++, ruleId: rule.id, epoch: rule.stateEpoch, key });
    },
    alert(rule: CompiledRule, ks: KeyState, a: AlertDraft) {
      if (rule.suppressForMs > 0) {
        if (ks.sup !== undefined && a.ts < ks.sup + rule.suppressForMs) {
          h.out.suppressed++;
          return;
        }
        ks.sup = a.ts;
      }
      const vars = (name: string): unknown =>
        name === 'key'
          ? a.key
          : name === 'ruleId'
            ? rule.id
            : Object.hasOwn(a.fields, name)
              ? a.fields[name]
              : undefined;
      add(h.out, 'alerts', {
        // Partition and state epoch make the cause unique even for key- and window-based alerts.
        id: alertId(rule.id, rule.version, `${scope}|${rule.stateEpoch}|${a.idParts}`),
        ruleId: rule.id,
        ruleVersion: rule.version,
        severity: rule.severity,
        title: rule.title(vars),
        key: a.key,
        partition: st.partition,
        ts: a.ts,
        events: a.events,
        values: a.values,
      });
    },
    error(rule, e, message, cause) {
      add(h.out, 'errors', {
        seq: e.ref.seq,
        ruleId: rule.id,
        error: new RuleEvaluationError(rule.id, cause ?? new Error(message)),
        event: e.event,
      });
    },
    overflow(rule, key, dropped, limit) {
      add(h.out, 'overflows', { ruleId: rule.id, key, dropped, limit });
    },
  };
  return h;
}
