/**
 * Who may call the admin API (SPEC §5):
 * - with a token, every /api call needs `Authorization: Bearer <token>` (constant-time check);
 * - without one, mutating calls are refused unless the server is bound to loopback;
 * - a browser request from another origin may never mutate (no CSRF from a page you visit).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import { errorBody } from './errors.js';

/** True for 127.0.0.0/8, ::1 and localhost. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h) || h === '::ffff:127.0.0.1';
}

function sameSecret(given: string, expected: string): boolean {
  // Hash both so the comparison is constant-time whatever the lengths.
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

function crossOrigin(origin: string | undefined, host: string | undefined): boolean {
  if (!origin) return false; // not a browser, or a same-origin GET-like request
  try {
    return new URL(origin).host !== host;
  } catch {
    return true; // "null" and other opaque origins
  }
}

export function apiAuth(options: { token: string | null; host: string }): MiddlewareHandler {
  const loopback = isLoopback(options.host);
  return async (c, next) => {
    if (options.token !== null) {
      const header = c.req.header('authorization') ?? '';
      const match = /^Bearer\s+(.+)$/i.exec(header);
      if (!match || !sameSecret(match[1] ?? '', options.token)) {
        c.header('WWW-Authenticate', 'Bearer realm="skiplock"');
        return c.json(
          errorBody('ERR_UNAUTHORIZED', 'Send Authorization: Bearer <SKIPLOCK_ADMIN_TOKEN>'),
          401,
        );
      }
    }
    if (c.req.method !== 'GET' && c.req.method !== 'HEAD') {
      if (options.token === null && !loopback) {
        return c.json(
          errorBody(
            'ERR_FORBIDDEN',
            'Mutating calls need SKIPLOCK_ADMIN_TOKEN when the server is not bound to loopback (127.0.0.1)',
          ),
          403,
        );
      }
      const origin = c.req.header('origin');
      const site = c.req.header('sec-fetch-site');
      const host = c.req.header('host');
      if (crossOrigin(origin, host) || site === 'cross-site') {
        return c.json(errorBody('ERR_FORBIDDEN', 'Cross-origin requests may not change jobs'), 403);
      }
    }
    await next();
  };
}
