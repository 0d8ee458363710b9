import type { HopMessage, PartitionRecord, RuleSet } from '../rules/index.js';

/**
 * The re-keying hop on the wire: a source partition sends key space `space`'s partition `p` its
 * messages (see `rules/source-hop.ts`) on `rekey.<space>.<p>`, stored in `REKEY`. A message is
 * text: one header line of numbers, then, for a forwarded event, its key and the event's JSON text
 * as the source read it (so the downstream parses exactly what the source parsed):
 *
 *     F <src> <origin> <n> <srcSeq> <controlSeq> <watermark> <ts> <publishTs> <key length>\n<key><event>
 *     R <src> <origin> <n> <controlSeq> <watermark> <horizon>
 *
 * A watermark or horizon of -Infinity (nothing seen yet) is `-`. Lines without `<origin>` (written
 * before numberings had origins) are read with origin 0.
 */

/** The subject of key space `space`'s partition `p` (a key space name is one subject token). */
export const rekeySubject = (space: string, p: number): string => `rekey.${space}.${p}`;
/** What `REKEY` stores. */
export const REKEY_SUBJECTS = ['rekey.>'] as const;

/** A message of `REKEY` as its downstream partition reads it, or why it cannot be one. */
export type HopClass =
  | {
      readonly kind: 'forward';
      readonly src: number;
      readonly origin: number;
      readonly n: number;
      readonly srcSeq: number;
      readonly controlSeq: number;
      readonly watermark: number;
      readonly ts: number;
      readonly publishTs: number;
      readonly key: string;
      readonly text: string;
    }
  | {
      readonly kind: 'report';
      readonly src: number;
      readonly origin: number;
      readonly n: number;
      readonly controlSeq: number;
      readonly watermark: number;
      readonly horizon: number;
    }
  | { readonly kind: 'dead'; readonly reason: 'bad-forward'; readonly message: string };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

const time = (x: number): string => (x === -Infinity ? '-' : String(x));

/** The payload of what source partition `src` sends (see the format above). */
export function hopPayload(src: number, m: HopMessage): Uint8Array {
  return encoder.encode(
    m.kind === 'forward'
      ? `F ${src} ${m.origin} ${m.n} ${m.srcSeq} ${m.controlSeq} ${time(m.watermark)} ${m.ts} ${m.publishTs} ${m.key.length}\n${m.key}${m.text}`
      : `R ${src} ${m.origin} ${m.n} ${m.controlSeq} ${time(m.watermark)} ${time(m.horizon)}`,
  );
}

const INTEGER = /^-?\d{1,16}$/;

function num(token: string | undefined, orNone = false): number | undefined {
  if (orNone && token === '-') return -Infinity;
  if (token === undefined || !INTEGER.test(token)) return undefined;
  const n = Number(token);
  return Number.isSafeInteger(n) ? n : undefined;
}

function dead(what: string): HopClass {
  return {
    kind: 'dead',
    reason: 'bad-forward',
    message: `${what}; REKEY holds what Vigil's source partitions send, nothing else may be published to rekey.>`,
  };
}

/** Reads a message of `REKEY`. Pure. */
export function classifyHop(data: Uint8Array): HopClass {
  const s = decoder.decode(data);
  const eol = s.indexOf('\n');
  const head = (eol < 0 ? s : s.slice(0, eol)).split(' ');
  const [kind, ...g] = head;
  // Written before numberings had origins (a report of five numbers, a forward of eight): origin 0.
  const f =
    (kind === 'R' && g.length === 5) || (kind === 'F' && g.length === 8)
      ? [g[0], '0', ...g.slice(1)]
      : g;
  if (kind === 'R' && eol < 0 && f.length === 6) {
    const [src, origin, n, controlSeq] = [num(f[0]), num(f[1]), num(f[2]), num(f[3])];
    const [watermark, horizon] = [num(f[4], true), num(f[5], true)];
    if (
      src !== undefined &&
      origin !== undefined &&
      n !== undefined &&
      controlSeq !== undefined &&
      watermark !== undefined &&
      horizon !== undefined
    )
      return { kind: 'report', src, origin, n, controlSeq, watermark, horizon };
    return dead('a report whose numbers are not integers');
  }
  if (kind === 'F' && eol >= 0 && f.length === 9) {
    const [src, origin, n, srcSeq, controlSeq] = [f[0], f[1], f[2], f[3], f[4]].map((t) => num(t));
    const [watermark, ts, publishTs, keyLength] = [
      num(f[5], true),
      num(f[6]),
      num(f[7]),
      num(f[8]),
    ];
    const body = s.slice(eol + 1);
    if (
      src === undefined ||
      origin === undefined ||
      n === undefined ||
      srcSeq === undefined ||
      controlSeq === undefined ||
      watermark === undefined ||
      ts === undefined ||
      publishTs === undefined ||
      keyLength === undefined ||
      keyLength < 1 ||
      keyLength > body.length
    )
      return dead('a forwarded event whose header is not eight integers and a key length');
    return {
      kind: 'forward',
      src,
      origin,
      n,
      srcSeq,
      controlSeq,
      watermark,
      ts,
      publishTs,
      key: body.slice(0, keyLength),
      text: body.slice(keyLength),
    };
  }
  return dead('not a forwarded event ("F …") or a source report ("R …")');
}

/**
 * What a key space's partition reads for a message from source partition `src` (as sent, or as
 * read off `REKEY`): the rules core's record at position `seq` of its log, judged under `ruleSet`
 * (the rule set of the message's control sequence).
 */
export function downstreamRecord(
  src: number,
  m: HopMessage | Exclude<HopClass, { kind: 'dead' }>,
  seq: number,
  ruleSet: RuleSet,
): Extract<PartitionRecord, { kind: 'forward' | 'report' }> {
  return m.kind === 'forward'
    ? {
        kind: 'forward',
        seq,
        src,
        origin: m.origin,
        n: m.n,
        srcSeq: m.srcSeq,
        ruleSet,
        watermark: m.watermark,
        key: m.key,
        data: m.text,
        publishTs: m.publishTs,
      }
    : {
        kind: 'report',
        seq,
        src,
        origin: m.origin,
        n: m.n,
        ruleSet,
        watermark: m.watermark,
        horizon: m.horizon,
      };
}
