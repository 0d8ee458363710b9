import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { clientSettings } from '../../control-plane/cli-client.js';

let dir: string;
/** No ~/.config/vigil/cli.json: HOME is an empty folder. */
let env: NodeJS.ProcessEnv;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'vigil-cli-settings-'));
  mkdirSync(join(dir, 'home'));
  env = { HOME: join(dir, 'home') };
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** What `npm start` writes under .vigil/ of the folder it runs in. */
function session(files: Record<string, string>): void {
  mkdirSync(join(dir, '.vigil'), { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, '.vigil', name), text);
}

describe("clientSettings: the CLI finds npm start's session under .vigil/", () => {
  it('without one: http://127.0.0.1:8080, nats://127.0.0.1:4222, no token', () => {
    expect(clientSettings({}, env, dir)).toEqual({
      url: 'http://127.0.0.1:8080',
      token: undefined,
      nats: 'nats://127.0.0.1:4222',
    });
  });

  it('takes the URL, token and NATS URL npm start wrote (its ports need not be the defaults)', () => {
    session({
      'api-url': 'http://127.0.0.1:18080\n',
      'api-token': 'tok\n',
      'nats-url': 'nats://127.0.0.1:14222\n',
    });
    expect(clientSettings({}, env, dir)).toEqual({
      url: 'http://127.0.0.1:18080',
      token: 'tok',
      nats: 'nats://127.0.0.1:14222',
    });
  });

  it('a flag, the environment or the config file still say otherwise', () => {
    session({ 'api-url': 'http://127.0.0.1:18080\n', 'nats-url': 'nats://127.0.0.1:14222\n' });
    expect(clientSettings({ url: 'http://h:1' }, env, dir).url).toBe('http://h:1');
    expect(clientSettings({}, { ...env, VIGIL_URL: 'http://h:2' }, dir).url).toBe('http://h:2');
    expect(clientSettings({ nats: 'nats://h:3' }, env, dir).nats).toBe('nats://h:3');
    expect(clientSettings({}, { ...env, NATS_URL: 'nats://h:4' }, dir).nats).toBe('nats://h:4');
    writeFileSync(join(dir, 'cli.json'), JSON.stringify({ url: 'http://h:5', nats: 'nats://h:6' }));
    const fromConfig = clientSettings({ config: 'cli.json' }, env, dir);
    expect([fromConfig.url, fromConfig.nats]).toEqual(['http://h:5', 'nats://h:6']);
  });

  it("sends the session's token only to the session's service", () => {
    session({ 'api-url': 'http://127.0.0.1:18080\n', 'api-token': 'tok\n' });
    expect(clientSettings({ url: 'https://vigil.example.com' }, env, dir).token).toBeUndefined();
    expect(clientSettings({ url: 'http://127.0.0.1:8080' }, env, dir).token).toBeUndefined();
    expect(clientSettings({ url: 'http://127.0.0.1:18080/' }, env, dir).token).toBe('tok');
    // Given explicitly, a token goes wherever the URL says.
    expect(
      clientSettings({ url: 'https://vigil.example.com', token: 'mine' }, env, dir).token,
    ).toBe('mine');
    // A session from before api-url existed: its token only to this machine.
    rmSync(join(dir, '.vigil', 'api-url'));
    expect(clientSettings({}, env, dir).token).toBe('tok');
    expect(clientSettings({ url: 'http://10.0.0.7:8080' }, env, dir).token).toBeUndefined();
  });

  it('an empty file is as if there were none', () => {
    session({ 'api-url': '\n', 'api-token': '', 'nats-url': '' });
    expect(clientSettings({}, env, dir)).toEqual({
      url: 'http://127.0.0.1:8080',
      token: undefined,
      nats: 'nats://127.0.0.1:4222',
    });
  });
});
