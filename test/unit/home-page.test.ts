import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { HOME_DOCS, HOME_LINKS, homePage } from '../../app/index.js';

const root = resolve(import.meta.dirname, '../..');

describe('GET / (app/home-page.ts)', () => {
  it('links the API, its description, metrics, liveness and readiness', () => {
    const hrefs = [...homePage().matchAll(/<a href="([^"]+)">/g)].map((m) => m[1]);
    // Relative, so that they still work behind a proxy that adds a prefix.
    expect(hrefs).toEqual(['v1/openapi.json', 'v1/status', 'metrics', 'healthz', 'readyz']);
    expect(HOME_LINKS.map((l) => l.path)).toEqual(hrefs.map((h) => `/${h}`));
    expect(homePage().startsWith('<!doctype html>')).toBe(true);
  });

  it('names documents that are in the repository', () => {
    expect(HOME_DOCS.length).toBeGreaterThan(0);
    for (const d of HOME_DOCS) {
      expect(existsSync(resolve(root, d.path)), d.path).toBe(true);
      expect(homePage()).toContain(`<code>${d.path}</code>`);
    }
  });
});
