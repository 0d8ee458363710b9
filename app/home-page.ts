import type { Application } from 'express';
import { SECURITY_HEADERS } from '../control-plane/index.js';

/** A link of the home page: a path of this server and what it is. */
export interface HomeLink {
  readonly path: string;
  readonly what: string;
}

/** What `GET /` links to: every route of the process a person opens in a browser first. */
export const HOME_LINKS: readonly HomeLink[] = [
  { path: '/v1/openapi.json', what: 'the REST API described (OpenAPI 3; no token needed)' },
  {
    path: '/v1/status',
    what: 'the REST API under /v1: this one and every other route need a token (Authorization: Bearer …; npm start writes one to .vigil/api-token)',
  },
  { path: '/metrics', what: 'Prometheus metrics' },
  { path: '/healthz', what: 'liveness' },
  {
    path: '/readyz',
    what: 'readiness: this process judges events now (its partitions running, caught up with CONTROL, checkpointing, leases renewed); 503 says why not',
  },
];

/** Documents of the repository the home page names (the server does not serve them). */
export const HOME_DOCS: readonly HomeLink[] = [
  { path: 'README.md', what: 'start here: npm start, the CLI walk-through, settings' },
  { path: 'docs/api.md', what: 'every route of the REST API and the vigil CLI' },
  { path: 'docs/rule-language.md', what: 'the rule language' },
  { path: 'docs/operations.md', what: 'the metrics, the alerts and what to do when one fires' },
  { path: 'docs/ARCHITECTURE.md', what: 'what is built and how it keeps its guarantees' },
];

const escape = (s: string): string =>
  s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c] ?? c);

/**
 * The HTML of `GET /`: links to the routes of {@link HOME_LINKS} (relative, so they hold behind a
 * proxy's prefix too) and the names of the documents of {@link HOME_DOCS}.
 */
export function homePage(): string {
  const links = HOME_LINKS.map(
    (l) =>
      `<li><a href="${escape(l.path.slice(1))}">${escape(l.path)}</a> — ${escape(l.what)}</li>`,
  );
  const docs = HOME_DOCS.map((d) => `<li><code>${escape(d.path)}</code> — ${escape(d.what)}</li>`);
  return [
    '<!doctype html>',
    '<html lang="en">',
    '<head><meta charset="utf-8"><title>Vigil</title></head>',
    '<body>',
    '<h1>Vigil</h1>',
    '<p>Rules over a stream of events on NATS JetStream. This server answers:</p>',
    `<ul>\n${links.join('\n')}\n</ul>`,
    '<p>In the repository:</p>',
    `<ul>\n${docs.join('\n')}\n</ul>`,
    '</body>',
    '</html>',
    '',
  ].join('\n');
}

/** Mounts `GET /` (the page of {@link homePage}) on the service's HTTP server. */
export function mountHomePage(app: Application): void {
  const html = homePage();
  app.get('/', (_req, res) => {
    res.set(SECURITY_HEADERS);
    res.type('html').send(html);
  });
}
