/**
 * The web dashboard's static files. They ship inside the package (no CDN): read once from
 * `dashboard/assets` beside the compiled code and served from memory.
 */
import { readFileSync } from 'node:fs';
import { Hono } from 'hono';

const ASSETS: Record<string, string> = {
  'app.js': 'text/javascript; charset=utf-8',
  'style.css': 'text/css; charset=utf-8',
  'favicon.svg': 'image/svg+xml',
};

function read(name: string): string {
  return readFileSync(new URL(`../dashboard/assets/${name}`, import.meta.url), 'utf8');
}

export function dashboardRoutes(options: { authRequired: boolean }): Hono {
  const files = new Map(Object.keys(ASSETS).map((name) => [name, read(name)]));
  const index = read('index.html').replace(
    'data-auth-required="false"',
    `data-auth-required="${options.authRequired}"`,
  );
  const routes = new Hono();
  const security = {
    'Content-Security-Policy':
      "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
  };
  routes.get('/', (c) => c.html(index, 200, { ...security, 'Cache-Control': 'no-cache' }));
  routes.get('/assets/:name', (c) => {
    const name = c.req.param('name');
    const body = files.get(name);
    if (body === undefined) return c.notFound();
    return c.body(body, 200, {
      'Content-Type': ASSETS[name] as string,
      'Cache-Control': 'no-cache',
      ...security,
    });
  });
  return routes;
}
