import { describe, expect, it } from 'vitest';
import {
  classifyRecord,
  eventsSubjects,
  foldControl,
  foldVersions,
  markerPayload,
  partitionOf,
  PROBE_PAYLOAD,
  tickPayload,
} from '../../protocol/index.js';
import { emptyRuleSet } from '../../rules/index.js';

const P = 4;
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
});
