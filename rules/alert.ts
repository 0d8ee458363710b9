import { createHash } from 'node:crypto';

/**
 * A deterministic alert id: a hash of the rule id, the rule version and what caused the alert
 * (log positions, or key and window), so a replay after a crash re-publishes the very same ids
 * and `Nats-Msg-Id` dedupe absorbs them.
 */
export function alertId(ruleId: string, ruleVersion: number, cause: string): string {
  return createHash('sha256')
    .update(`${ruleId}\u0000${ruleVersion}\u0000${cause}`)
    .digest('hex')
    .slice(0, 32);
}
