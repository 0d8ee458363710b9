import { describe, expect, it } from 'vitest';
import {
  alertSubject,
  classifyRecord,
  dlqSubject,
  eventsSubjects,
  eventSubject,
  isValidKey,
  markerSubject,
  partitionedEventSubject,
  partitionFilter,
  partitionMapping,
  partitionRecord,
  storedAtMs,
  tickSubject,
  foldControl,
  foldVersions,
  markerPayload,
  partitionOf,
  PROBE_PAYLOAD,
  tickPayload,
} from '../../protocol/index.js';
import { emptyRuleSet } from '../../rules/index.js';

const P = 4;
/** FNV-1a 32-bit of the UTF-8 bytes of "é" (c3 a9), computed outside this code. */
const FNV_E_ACUTE = 0x1e9de8c1;
const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const keyOn = (p: number): string => {
  for (let i = 0; ; i++) if (partitionOf(`k${i}`, P) === p) return `k${i}`;
};

describe('the protocol of the logs', () => {
  it('tells every kind of record of a partition apart, from its subject and Vigil payloads', () => {
    const k = keyOn(2);
    const at = (subject: string, data: Uint8Array | string) =>
      classifyRecord(subject, typeof data === 'string' ? enc(data) : data, 2, P);
    expect(at(`events.${k}.2`, '{"type":"x"}')).toEqual({ kind: 'event', key: k });
    expect(at('events._vigil.2', markerPayload(7))).toEqual({ kind: 'marker', controlSeq: 7 });
    expect(at('events._tick.2', tickPayload(1234))).toEqual({ kind: 'tick', ts: 1234 });
    expect(at('events._probe3.2', PROBE_PAYLOAD)).toEqual({ kind: 'probe' });
    // Earlier versions' probes carried {}.
    expect(at('events._probe.2', '{}')).toEqual({ kind: 'probe' });
    const dead = (subject: string, data: string) => {
      const c = at(subject, data);
      return c.kind === 'dead' ? c.reason : c.kind;
    };
    expect(dead('events._vigil.2', '{"vigil":"epoch","controlSeq":0}')).toBe('bad-marker');
    expect(dead('events._vigil.2', 'nope')).toBe('bad-marker');
    expect(dead('events._tick.2', '{"vigil":"tick","ts":1.5}')).toBe('bad-tick');
    expect(dead('events._probe3.2', '{"type":"x"}')).toBe('reserved-key');
    expect(dead('events._probe16.2', PROBE_PAYLOAD)).toBe('reserved-key');
    expect(dead('events._secret.2', '{"type":"x"}')).toBe('reserved-key');
    expect(dead(`events.${keyOn(1)}.2`, '{"type":"x"}')).toBe('wrong-partition');
    expect(dead(`events.${k}.3`, '{"type":"x"}')).toBe('bad-subject');
    expect(dead(`events.${k}`, '{"type":"x"}')).toBe('bad-subject');
    expect(dead(`events.${k}.2.x`, '{"type":"x"}')).toBe('bad-subject');
  });

  it('EVENTS stores one subject per partition, each a partition consumer filter', () => {
    expect(eventsSubjects(3)).toEqual(['events.*.0', 'events.*.1', 'events.*.2']);
  });

  it('folds CONTROL as the shards do: a message that is not a control message is rejected and still advances the sequence', () => {
    const ok = foldControl(emptyRuleSet(), enc('{"op":"clear-state"}'), 1);
    expect(ok.ok).toBe(true);
    const bad = foldControl(ok.ruleSet, enc('{"op":'), 2);
    expect(bad.ok).toBe(false);
    expect(bad.ruleSet.controlSeq).toBe(2);
    const versions = foldVersions([
      { seq: 1, data: enc('{"op":"clear-state"}') },
      { seq: 2, data: enc('nope') },
    ]);
    expect([...versions.keys()]).toEqual([0, 1, 2]);
    expect(versions.get(2)?.controlSeq).toBe(2);
  });

  it('names the subjects of the logs, each key one subject token', () => {
    expect(eventSubject('acct-1')).toBe('events.acct-1');
    expect(partitionedEventSubject('acct-1', 3)).toBe('events.acct-1.3');
    expect(partitionFilter(3)).toBe('events.*.3');
    expect([markerSubject(0), tickSubject(15)]).toEqual(['events._vigil.0', 'events._tick.15']);
    expect(alertSubject('high', 'r1')).toBe('alerts.high.r1');
    expect(dlqSubject('late')).toBe('vigil.dlq.late');
    expect(partitionMapping(16)).toBe(
      'mappings = { "events.*": "events.{{wildcard(1)}}.{{partition(16,1)}}" }',
    );
    for (const bad of ['', 'a.b', 'a*', '>', 'a b', 'tab\t'.replace('\\t', '\t')])
      expect(isValidKey(bad), JSON.stringify(bad)).toBe(false);
    expect(isValidKey('user_42-é')).toBe(true);
  });

  it('partitions keys as the server mapping does: FNV-1a of the key, modulo P', () => {
    // nats-server's partition(P, 1) is FNV-1a (32-bit) of the token modulo P: fixed values
    // catch a change of hash, and every partition gets keys.
    expect(partitionOf('a', 1 << 30)).toBe(0xe40c292c % (1 << 30));
    // A key that is not ASCII is hashed over its UTF-8 bytes.
    expect(partitionOf('é', 1 << 30)).toBe(FNV_E_ACUTE % (1 << 30));
    expect(partitionOf('x', 1)).toBe(0);
    const seen = new Set(Array.from({ length: 400 }, (_, i) => partitionOf(`k${i}`, 7)));
    expect([...seen].sort()).toEqual([0, 1, 2, 3, 4, 5, 6]);
  });

  it('reads the store time in whole milliseconds', () => {
    expect(storedAtMs({ timestampNanos: 123_999_999 })).toBe(123);
  });

  it('turns a stored message into the record the rules core replays, or nothing', () => {
    const k = keyOn(1);
    const rs = { ...emptyRuleSet(), controlSeq: 5 };
    const at = (subject: string, data: string | Uint8Array, inForce = 0) =>
      partitionRecord(
        { seq: 9, subject, data: typeof data === 'string' ? enc(data) : data, storedAt: 1000 },
        P,
        (seq) => (seq === 5 ? rs : undefined),
        () => inForce,
      );
    expect(at(`events.${k}.1`, '{"type":"t"}')).toEqual({
      partition: 1,
      record: { kind: 'event', seq: 9, key: k, data: enc('{"type":"t"}'), publishTs: 1000 },
    });
    expect(at('events._tick.1', tickPayload(900))).toEqual({
      partition: 1,
      record: { kind: 'tick', seq: 9, ts: 900, storedAt: 1000 },
    });
    expect(at('events._vigil.1', markerPayload(5))).toEqual({
      partition: 1,
      record: { kind: 'marker', seq: 9, ruleSet: rs },
    });
    // A marker of a rule set not in CONTROL, or one in force already, is no record.
    expect(at('events._vigil.1', markerPayload(6))).toBeUndefined();
    expect(at('events._vigil.1', markerPayload(5), 5)).toBeUndefined();
    // A partition that does not exist, a probe and a dead letter are no record either.
    expect(at(`events.${k}.4`, '{}')).toBeUndefined();
    expect(at(`events.${k}.x`, '{}')).toBeUndefined();
    expect(at('events._probe.1', PROBE_PAYLOAD)).toBeUndefined();
    expect(at(`events.${keyOn(2)}.1`, '{"type":"t"}')).toBeUndefined();
  });
});
