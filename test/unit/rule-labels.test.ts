import { AggregatorRegistry, Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { capRuleLabels, OTHER_RULE_LABEL, RuleLabels } from '../../service/metrics/metrics.js';

/** Two workers' registries counting alerts of the given rules. */
async function workers(
  counts: Record<string, number>[],
): Promise<Awaited<ReturnType<Registry['getMetricsAsJSON']>>> {
  const parts = await Promise.all(
    counts.map((c) => {
      const registry = new Registry();
      const alerts = new Counter({
        name: 'vigil_alerts_total',
        help: 'h',
        labelNames: ['rule'],
        registers: [registry],
      });
      for (const [rule, n] of Object.entries(c)) alerts.inc({ rule }, n);
      return registry.getMetricsAsJSON();
    }),
  );
  return AggregatorRegistry.aggregate(parts).getMetricsAsJSON();
}

async function capped(labels: RuleLabels, counts: Record<string, number>[]): Promise<string> {
  return AggregatorRegistry.aggregate([capRuleLabels(await workers(counts), labels)]).metrics();
}

describe('rule label cap', () => {
  it('keeps the first rules and sticks to them', () => {
    const labels = new RuleLabels(2);
    expect(['a', 'b', 'c', 'a', 'd', 'b'].map((r) => labels.label(r))).toEqual([
      'a',
      'b',
      OTHER_RULE_LABEL,
      'a',
      OTHER_RULE_LABEL,
      'b',
    ]);
  });

  it('caps the merged exposition for the whole process, adding the overflow up', async () => {
    const labels = new RuleLabels(2);
    // The workers see the rules in different orders; sorted admission makes the choice stable.
    const text = await capped(labels, [
      { zeta: 1, alpha: 2 },
      { beta: 3, zeta: 4, gamma: 5 },
    ]);
    expect(text).toContain('vigil_alerts_total{rule="alpha"} 2');
    expect(text).toContain('vigil_alerts_total{rule="beta"} 3');
    expect(text).toContain(`vigil_alerts_total{rule="${OTHER_RULE_LABEL}"} 10`);
    expect(text).not.toMatch(/rule="(zeta|gamma)"/);
    // A rule that was admitted keeps its label even when later scrapes bring new ones first in order.
    const later = await capped(labels, [{ aaa: 1, zeta: 1, alpha: 7 }]);
    expect(later).toContain('vigil_alerts_total{rule="alpha"} 7');
    expect(later).toContain(`vigil_alerts_total{rule="${OTHER_RULE_LABEL}"} 2`);
    expect(later.match(/rule="/g)).toHaveLength(2);
  });

  it('0 puts every rule in _other', async () => {
    const text = await capped(new RuleLabels(0), [{ a: 1 }, { b: 2 }]);
    expect(text).toContain(`vigil_alerts_total{rule="${OTHER_RULE_LABEL}"} 3`);
  });
});
