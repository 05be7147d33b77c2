/**
 * Who may call the admin server (SPEC §5):
 * - a loopback-bound server answers only requests addressed to a loopback name (`Host`), on
 *   every route: a page whose domain rebinds to 127.0.0.1 (DNS rebinding) reaches nothing;
 * - with a token, every /api call and /metrics need `Authorization: Bearer <token>`
 *   (constant-time check);
 * - without one, mutating calls are refused unless the server is bound to loopback;
 * - a browser request from another origin may never mutate (no CSRF from a page you visit).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import { errorBody } from './errors.js';

const OCTET = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)';
const LOOPBACK_V4 = new RegExp(`^127(?:\\.${OCTET}){3}$`);

/** True for 127.0.0.0/8, ::1 and localhost. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || LOOPBACK_V4.test(h) || h === '::ffff:127.0.0.1';
}

/** True for a bind to every address of the machine (`0.0.0.0`, `::`). */
export function isWildcard(host: string): boolean {
  return host === '0.0.0.0' || host === '::' || host === '[::]';
}

/**
 * True when a `Host` header value (`name`, `name:port`, `[v6]` or `[v6]:port`) names a loopback
 * address. Names are compared exactly (case aside): `localhost.` or `127.0.0.1.nip.io` resolve
 * through DNS, which is what a rebinding attacker controls.
 */
export function isLoopbackHost(value: string | undefined): boolean {
  if (value === undefined) return false;
  const match = /^(?:\[([^\]]+)\]|([^:[\]]+))(?::\d{1,5})?$/.exec(value.trim());
  const name = match?.[1] ?? match?.[2];
  return name !== undefined && isLoopback(name);
}

/** The host of a URL, or undefined when it does not parse (e.g. Host `127.0.0.256`). */
function hostOf(url: string): string | undefined {
  try {
    return new URL(url).host;
  } catch {
    return undefined;
  }
}

/**
 * DNS-rebinding guard of a loopback-bound server: a request whose `Host` (and request target)
 * is not a loopback name is refused with 403 before any route, so nothing is read from the
 * database. A server bound to another address does not check (it relies on the token).
 */
export function loopbackHostOnly(bindHost: string): MiddlewareHandler {
  if (!isLoopback(bindHost)) return async (_c, next) => next();
  return async (c, next) => {
    // The request target's host is the Host header, except for an absolute-form target; without
    // a Host header (HTTP/1.0, or app.request in tests) it is the bound address.
    const target = hostOf(c.req.url);
    const header = c.req.header('host') ?? target;
    if (!isLoopbackHost(header) || !isLoopbackHost(target)) {
      return c.json(
        errorBody(
          'ERR_FORBIDDEN',
          `Host ${JSON.stringify(header ?? '')} is not a loopback name: this server is bound to ${bindHost} and answers only requests to 127.0.0.1, localhost or [::1] (DNS-rebinding protection). A reverse proxy in front of it must pass the upstream host`,
        ),
        403,
      );
    }
    await next();
  };
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

/** Token, loopback and same-origin rules of /api (and, for the token, /metrics). */
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
