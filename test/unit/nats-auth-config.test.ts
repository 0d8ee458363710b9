import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { natsAccounts, natsConfig } from '../../scripts/local-servers.js';

const example = readFileSync(
  resolve(import.meta.dirname, '../../control-plane/nats-auth.example.conf'),
  'utf8',
);
const passwords = {
  vigil: 'change-me-vigil',
  operator: 'change-me-operator',
  producer: 'change-me-producer',
  alerts: 'change-me-alerts',
};

describe('NATS users and permissions', () => {
  it('the shipped example is the block npm start writes, with example passwords', () => {
    const block = example.slice(example.indexOf('accounts {'));
    expect(block).toBe(natsAccounts(16, passwords));
  });

  it('refuses producers the subjects only Vigil writes: epoch markers, ticks and probes', () => {
    const block = natsAccounts(16, passwords);
    const producer = block.slice(block.indexOf('user: producer'), block.indexOf('user: alerts'));
    for (const subject of [
      'events._vigil.*',
      'events._tick.*',
      'events._probe.*',
      'events._probe15.*',
    ])
      expect(producer).toContain(`"${subject}"`);
  });

  it('a config with users holds the mapping inside the account, and none outside it', () => {
    const conf = natsConfig({ port: -1, storeDir: '/tmp/x', partitions: 4, users: passwords });
    expect(conf.match(/mappings = /g)).toHaveLength(1);
    expect(conf).toContain('{{partition(4,1)}}');
    expect(conf).toContain('accounts {');
    expect(natsConfig({ port: -1, storeDir: '/tmp/x', partitions: 4 })).not.toContain('accounts');
  });
});
