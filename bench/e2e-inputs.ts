/**
 * The deterministic inputs of the end-to-end benchmark (and of `bench:core`, which runs the same
 * rules and events through the rules core alone), and the vocabulary `bench:rules` shares: 20 event types, ~200-byte payment-like events,
 * 1,000 rules (80% plain conditions, 20% sliding threshold rules). Seeded mulberry32.
 */
import { prng } from '../test/prng.js';
import type { Condition, Rule, TopCondition } from '../rules/index.js';
// ---------------------------------------------------------------------------------------------
// Deterministic inputs: 20 event types, payment-like events, 1,000 rules
// ---------------------------------------------------------------------------------------------

export type Rand = () => number;

export const int = (rand: Rand, lo: number, hi: number): number =>
  lo + Math.floor(rand() * (hi - lo + 1));
export const pick = <T>(rand: Rand, xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;

export function sample<T>(rand: Rand, xs: readonly T[], n: number): T[] {
  const copy = [...xs];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [copy[i], copy[j]] = [copy[j] as T, copy[i] as T];
  }
  return copy.slice(0, Math.min(n, copy.length));
}

export function weighted<T>(rand: Rand, xs: readonly T[], weights: readonly number[]): T {
  const total = weights.reduce((a, b) => a + b, 0);
  let r = rand() * total;
  for (let i = 0; i < xs.length; i++) {
    r -= weights[i] as number;
    if (r < 0) return xs[i] as T;
  }
  return xs[xs.length - 1] as T;
}

/** A payment-like amount: log-normal, median 120, long tail; rounded to cents. */
export function amount(rand: Rand): number {
  const u = 1 - rand();
  const z = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rand());
  return Math.round(Math.exp(Math.log(120) + 1.3 * z) * 100) / 100;
}

export const EVENT_TYPES = [
  'payment',
  'login',
  'transfer',
  'withdrawal',
  'deposit',
  'refund',
  'chargeback',
  'card_added',
  'password_reset',
  'address_change',
  'p2p_send',
  'bill_pay',
  'top_up',
  'atm_withdrawal',
  'wire_out',
  'crypto_buy',
  'loan_apply',
  'account_open',
  'device_change',
  'email_change',
] as const;

// prettier-ignore
export const COUNTRIES = [
  'US', 'GB', 'DE', 'FR', 'ES', 'IT', 'NL', 'PL', 'SE', 'IE', 'CA', 'MX', 'BR', 'AR', 'CO', 'NG',
  'GH', 'KE', 'ZA', 'EG', 'RU', 'UA', 'TR', 'IN', 'PK', 'CN', 'HK', 'SG', 'PH', 'VN', 'ID', 'AE',
] as const;
export const COUNTRY_WEIGHTS: readonly number[] = COUNTRIES.map((_, i) =>
  i === 0 ? 30 : i === 1 ? 10 : i === 2 ? 8 : i === 3 ? 6 : 2,
);
export const CHANNELS = ['web', 'mobile', 'pos', 'atm', 'api'] as const;
export const CHANNEL_WEIGHTS = [35, 35, 18, 7, 5] as const;
// prettier-ignore
export const MCCS = [
  '5411', '5812', '5814', '5912', '5999', '4829', '6011', '6012', '6051', '6540', '7995', '7273',
  '5967', '5816', '4814', '5732', '5944', '5094', '4722', '7011', '3000', '4111', '5541', '5311',
  '5651', '5691', '5045', '7399', '8999', '9399',
] as const;
const CURRENCIES = ['USD', 'EUR', 'GBP'] as const;

export const leaf = (fact: string, operator: string, value: unknown): Condition => ({
  fact,
  operator,
  value,
});

/** Between `lo` and `hi` of the countries, none twice. */
export const countries = (rand: Rand, lo: number, hi: number): string[] =>
  sample(rand, COUNTRIES, int(rand, lo, hi));
/** Between `lo` and `hi` of the merchant categories, none twice. */
export const mccs = (rand: Rand, lo: number, hi: number): string[] =>
  sample(rand, MCCS, int(rand, lo, hi));

/**
 * Fraud shape: a big amount (one of `amounts`) from a risky country through a risky channel or
 * merchant category; `countryCount` and `mccCount` bound the lengths of the two lists.
 */
export function bigAmountWhen(
  rand: Rand,
  amounts: readonly number[],
  countryCount: readonly [lo: number, hi: number],
  mccCount: readonly [lo: number, hi: number],
): TopCondition {
  return {
    all: [
      leaf('amount', pick(rand, ['greaterThan', 'greaterThanInclusive']), pick(rand, amounts)),
      leaf('country', 'in', countries(rand, ...countryCount)),
      {
        any: [
          leaf('channel', 'equal', pick(rand, CHANNELS)),
          leaf('mcc', 'in', mccs(rand, ...mccCount)),
        ],
      },
    ],
  };
}

/** Fraud shape: an amount of at least one of `amounts` outside the usual countries, on some channels. */
export function foreignAmountWhen(rand: Rand, amounts: readonly number[]): TopCondition {
  return {
    all: [
      leaf('amount', 'greaterThanInclusive', pick(rand, amounts)),
      leaf('country', 'notIn', countries(rand, 3, 6)),
      leaf('channel', 'in', sample(rand, CHANNELS, int(rand, 2, 3))),
    ],
  };
}

/** Fraud shape, card testing: an amount under one of `amounts`, online, outside home countries. */
export function cardTestingWhen(rand: Rand, amounts: readonly number[]): TopCondition {
  return {
    all: [
      leaf('amount', 'lessThan', pick(rand, amounts)),
      leaf('channel', 'equal', pick(rand, ['web', 'api'])),
      { not: leaf('country', 'in', countries(rand, 2, 5)) },
    ],
  };
}

/**
 * A plain rule (no pattern): the fraud shapes of `rules-bench.ts`, with thresholds chosen so that
 * a rule rarely accepts an event (about 1 in 10,000): alerts stay a small fraction of events.
 */
function plainRule(rand: Rand, id: string, type: string): Rule {
  const r = rand();
  let when: TopCondition;
  if (r < 0.5) {
    when = bigAmountWhen(rand, [3000, 5000, 8000, 12000], [4, 10], [2, 10]);
  } else if (r < 0.7) {
    when = foreignAmountWhen(rand, [5000, 10000]);
  } else if (r < 0.85) {
    // Huge amount anywhere, or a rare country, merchant category and channel together.
    when = {
      any: [
        leaf('amount', 'greaterThan', pick(rand, [20000, 50000])),
        {
          all: [
            leaf('country', 'in', sample(rand, COUNTRIES.slice(4), int(rand, 1, 3))),
            leaf('mcc', 'in', mccs(rand, 2, 4)),
            leaf('channel', 'equal', 'atm'),
          ],
        },
      ],
    };
  } else {
    when = cardTestingWhen(rand, [0.5, 1, 2]);
  }
  return {
    id,
    on: [type],
    when,
    alert: {
      severity: pick(rand, ['low', 'medium', 'high']),
      title: '{{type}} of {{amount}} from {{country}} on {{cardId}}',
    },
  };
}

/** A threshold rule: count or sum over a sliding window, keyed by the event's key (the default). */
function thresholdRule(rand: Rand, id: string, type: string): Rule {
  const filter: TopCondition = pick(rand, [
    { all: [leaf('amount', 'greaterThan', pick(rand, [50, 100, 200]))] },
    { all: [leaf('channel', 'in', sample(rand, CHANNELS, 2))] },
    { all: [leaf('country', 'notIn', ['US', 'GB', 'DE'])] },
  ]);
  const pattern =
    rand() < 0.5
      ? {
          kind: 'threshold' as const,
          aggregate: 'count' as const,
          window: pick(rand, ['5m', '10m', '30m']),
          operator: '>=' as const,
          value: int(rand, 5, 8),
        }
      : {
          kind: 'threshold' as const,
          aggregate: 'sum' as const,
          field: 'amount',
          window: pick(rand, ['10m', '1h']),
          operator: '>' as const,
          value: pick(rand, [30000, 50000, 100000]),
        };
  return {
    id,
    on: [type],
    when: filter,
    pattern,
    alert: { severity: 'high', title: '{{type}} velocity on {{key}}', suppressFor: '10m' },
  };
}

/**
 * `n` rules over the 20 event types, round robin, so each event meets n/20 of them (5%):
 * 80% plain conditions, 20% threshold rules. `rekeyedPercent` of the threshold rules are keyed
 * by `merchant` instead of the event's key (the card): with the re-keying hop on, theirs go
 * through it (a plain rule keeps no state, so keyed by another field it would take no hop).
 */
export function generateRules(n: number, seed: number, rekeyedPercent = 0): Rule[] {
  const rand = prng(seed);
  const rules: Rule[] = [];
  let thresholds = 0;
  for (let i = 0; i < n; i++) {
    const type = EVENT_TYPES[i % EVENT_TYPES.length] as string;
    const threshold = i % 5 === 4;
    const id = `${threshold ? 'thr' : 'rule'}-${String(i).padStart(4, '0')}`;
    if (!threshold) {
      rules.push(plainRule(rand, id, type));
      continue;
    }
    const rule = thresholdRule(rand, id, type);
    // Spread evenly: the k-th threshold rule is re-keyed when the running share falls behind.
    const rekeyed =
      Math.floor(((thresholds + 1) * rekeyedPercent) / 100) >
      Math.floor((thresholds * rekeyedPercent) / 100);
    thresholds++;
    rules.push(
      rekeyed
        ? {
            ...rule,
            key: 'merchant',
            alert: { ...rule.alert, title: '{{type}} velocity at {{merchant}}' },
          }
        : rule,
    );
  }
  return rules;
}

/** Payment-like events, about 200 bytes of JSON each; event time is the publish time (no `ts`). */
export function eventGenerator(
  seed: number,
  keys: number,
): (i: number) => { key: string; data: Uint8Array } {
  const rand = prng(seed ^ 0x5bd1e995);
  const encoder = new TextEncoder();
  const keyWidth = String(keys - 1).length;
  return (i) => {
    const key = `k${String(Math.floor(rand() * keys)).padStart(keyWidth, '0')}`;
    const json =
      `{"type":"${pick(rand, EVENT_TYPES)}","id":"e${i}","cardId":"${key}",` +
      `"amount":${amount(rand)},"currency":"${pick(rand, CURRENCIES)}",` +
      `"country":"${weighted(rand, COUNTRIES, COUNTRY_WEIGHTS)}",` +
      `"channel":"${weighted(rand, CHANNELS, CHANNEL_WEIGHTS)}","mcc":"${pick(rand, MCCS)}",` +
      `"deviceId":"d${int(rand, 0, 99999)}","ip":"10.${int(rand, 0, 255)}.${int(rand, 0, 255)}.${int(rand, 1, 254)}",` +
      `"merchant":"m${int(rand, 0, 9999)}"}`;
    return { key, data: encoder.encode(json) };
  };
}
