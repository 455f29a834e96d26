/// <reference types="node" preserve="true" />
import type { IncomingMessage, ServerResponse } from 'node:http';
import { IpnKitError, messageOf } from '../pipeline/errors.js';
import type { NodeHandler } from '../adapters/node-handler.js';
import type { DeliveryStatus, ListOptions } from '../stores/store.js';
import { resolveAdminOptions, type AdminOptions } from './admin-options.js';
import { csrfAllows, csrfCookie, csrfCookieOf, newCsrfToken } from './csrf.js';
import { createEventRing } from './event-ring.js';
import { layout, STYLE, type Html } from './html.js';
import { createMasker } from './mask.js';
import { confirmPage, entryPage, overviewPage, resultPage, type Confirmation } from './pages.js';
import { readForm } from './read-form.js';

/** The operator's page: a handler that Express mounts with `app.use(path, admin)` and `http.createServer` takes. */
export type AdminRouter = NodeHandler;

const STATUSES: ReadonlySet<string> = new Set<DeliveryStatus>(['received', 'delivered', 'failed', 'dead']);
const DAY = 24 * 60 * 60 * 1000;
const HEADERS = {
  'Content-Security-Policy':
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'X-Frame-Options': 'DENY',
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

/**
 * The operator's page for payment notifications: counts, a filtered list of the durable inbox, each entry's
 * record, attempts and last error, the router's metrics and recent rejections, and the actions (replay one,
 * replay the dead, purge delivered, reconcile by hand), each confirmed, CSRF-protected and behind
 * `authorize`. Server-rendered HTML with its own style sheet: no build step, no CDN, no script.
 *
 * @example
 * import { adminRouter } from 'ipn-kit/admin';
 * app.use('/ops/ipn', requireLogin, adminRouter({ ipn, authorize: (req) => req.user?.isAdmin === true }));
 */
export function adminRouter(
  options: Partial<AdminOptions> & Pick<AdminOptions, 'ipn' | 'authorize'>,
): AdminRouter {
  const resolved = resolveAdminOptions(options);
  const { ipn, authorize, title, pageSize, logger } = resolved;
  const mask = createMasker(resolved.logCustomerData);
  const ring = createEventRing(ipn, resolved.recentEvents);

  const handler: AdminRouter = (req, res) => {
    const mount = (req as { baseUrl?: unknown }).baseUrl;
    const base = stripSlash(typeof mount === 'string' ? mount : '');
    void respond(req, res, base).catch((error: unknown) => {
      // What failed underneath (the store, most likely): logged, and a page that says so, never a crash.
      logger.error(
        { err: { message: messageOf(error) }, path: (req.url ?? '').split('?')[0] },
        'ipn-kit admin: the page could not be built (the store failed?)',
      );
      try {
        if (!res.headersSent) {
          const message =
            'The inbox could not be read or changed: see the application log, and retry in a moment.';
          return send(res, 503, page(base, resultPage(base, message, false)), undefined, {
            'Retry-After': '5',
          });
        }
        res.end();
      } catch {
        // The connection is gone: nothing left to answer.
      }
    });
  };

  async function respond(req: IncomingMessage, res: ServerResponse, base: string): Promise<void> {
    if (!(await allowed(req))) return send(res, 403, page(base, resultPage(base, 'Not authorised.', false)));
    const url = parseUrl(req.url);
    if (url === undefined || hasNul(url.searchParams)) return badRequest(res, base);
    if (url.pathname === '/admin.css') return send(res, 200, STYLE, 'text/css; charset=utf-8');
    const method = req.method ?? 'GET';
    if (method === 'GET' || method === 'HEAD') return get(req, res, base, url);
    if (method === 'POST') return post(req, res, base, url.pathname);
    return send(
      res,
      405,
      page(base, resultPage(base, `Method ${method} is not allowed here.`, false)),
      undefined,
      {
        Allow: 'GET, HEAD, POST',
      },
    );
  }

  async function allowed(req: IncomingMessage): Promise<boolean> {
    try {
      return (await authorize(req)) === true;
    } catch {
      return false; // a failing check never opens the page
    }
  }

  const page = (base: string, body: Html): string => layout(title, base, body);

  async function get(req: IncomingMessage, res: ServerResponse, base: string, url: URL): Promise<void> {
    let csrf = csrfCookieOf(req);
    const cookie = csrf === undefined ? csrfCookie((csrf = newCsrfToken()), isSecure(req)) : undefined;
    const extra = cookie ? { 'Set-Cookie': cookie } : undefined;
    const { pathname, searchParams } = url;
    if (pathname === '/' || pathname === '') {
      return send(res, 200, page(base, await overview(base, searchParams)), undefined, extra);
    }
    if (pathname === '/entry') {
      const entry = await durable(() => ipn.inbox.get(searchParams.get('key') ?? ''));
      if (!entry)
        return send(res, 404, page(base, resultPage(base, 'No such entry.', false)), undefined, extra);
      return send(res, 200, page(base, entryPage(base, entry, mask)), undefined, extra);
    }
    if (pathname === '/confirm') {
      const confirmation = confirmationOf(searchParams);
      if (!confirmation)
        return send(res, 400, page(base, resultPage(base, 'Unknown action.', false)), undefined, extra);
      return send(res, 200, page(base, confirmPage(base, csrf, confirmation)), undefined, extra);
    }
    return send(res, 404, page(base, resultPage(base, 'No such page.', false)), undefined, extra);
  }

  async function overview(base: string, query: URLSearchParams): Promise<Html> {
    const pageNumber = Math.max(1, Math.min(10_000, Number.parseInt(query.get('page') ?? '1', 10) || 1));
    const filters = filtersOf(query);
    const metrics = ipn.metrics();
    const recent = ring.recent();
    const entries = await durable(() =>
      ipn.inbox.list({
        ...filters,
        order: 'newest',
        limit: pageSize + 1,
        offset: (pageNumber - 1) * pageSize,
      }),
    );
    if (entries === undefined) return overviewPage({ base, metrics, recent, mask });
    const [counts, lastHour] = await Promise.all([
      ipn.inbox.countByStatus(),
      ipn.inbox.countByStatus(new Date(Date.now() - 60 * 60 * 1000)),
    ]);
    const inbox = {
      counts,
      lastHour,
      entries: entries.slice(0, pageSize),
      filters,
      page: pageNumber,
      hasNext: entries.length > pageSize,
      query: keep(query, ['status', 'transaction', 'q', 'from', 'to']),
    };
    return overviewPage({ base, inbox, metrics, recent, mask });
  }

  async function post(
    req: IncomingMessage,
    res: ServerResponse,
    base: string,
    action: string,
  ): Promise<void> {
    const form = await readForm(req);
    if (form === undefined)
      return send(res, 413, page(base, resultPage(base, 'The form is too large.', false)));
    if (hasNul(form)) return badRequest(res, base);
    if (!csrfAllows(req, form.get('csrf') ?? undefined)) {
      return send(
        res,
        403,
        page(
          base,
          resultPage(
            base,
            'The form expired or came from another site: reload the page and try again.',
            false,
          ),
        ),
      );
    }
    const done = (message: string, ok = true, link?: string) =>
      send(res, ok ? 200 : 409, page(base, resultPage(base, message, ok, link)));
    try {
      if (action === '/replay') {
        const key = form.get('key') ?? '';
        const link = `${base}/entry?key=${encodeURIComponent(key)}`;
        return (await ipn.inbox.replay(key))
          ? done(`Replayed ${key}: it is delivered again now.`, true, link)
          : done(`No entry ${key} to replay.`, false);
      }
      if (action === '/replay-dead') return done(`Replayed ${await ipn.inbox.replayDead()} dead entries.`);
      if (action === '/purge') {
        const before = dateOf(form.get('before'));
        if (!before) return done('Give the date before which delivered entries are purged.', false);
        return done(
          `Purged ${await ipn.inbox.purge(before)} delivered entries delivered before ${before.toISOString().slice(0, 10)}.`,
        );
      }
      if (action === '/reconcile') {
        const id = (form.get('transaction') ?? '').trim();
        if (!id) return done('Give a transaction id.', false);
        const { record, emitted } = await ipn.reconcile(id);
        const outcome = emitted
          ? 'its notification was delivered now'
          : 'nothing was delivered (not final yet, or already handled)';
        return done(`The service says ${id} is ${String(record.state)}: ${outcome}.`);
      }
    } catch (error) {
      if (!(error instanceof IpnKitError)) {
        logger.error({ err: { message: messageOf(error) }, action }, 'ipn-kit admin: an action failed');
      }
      return done(describe(error), false);
    }
    return send(res, 404, page(base, resultPage(base, 'No such action.', false)));
  }

  function badRequest(res: ServerResponse, base: string): void {
    const message =
      'The address or the form holds something no notification can hold (a NUL character, a broken URL).';
    return send(res, 400, page(base, resultPage(base, message, false)));
  }

  return handler;
}

/** The request's path and query, or `undefined` for a target that is no URL (`//[`). */
function parseUrl(target: string | undefined): URL | undefined {
  try {
    return new URL(target ?? '/', 'http://admin.invalid');
  } catch {
    return undefined;
  }
}

/** A NUL character fits in no key, transaction id or `custom_data` (PostgreSQL's text refuses it). */
function hasNul(values: URLSearchParams): boolean {
  for (const [name, value] of values) if (name.includes('\u0000') || value.includes('\u0000')) return true;
  return false;
}

/** `undefined` when the router has no durable inbox (at-most-once mode); other failures propagate. */
async function durable<T>(read: () => Promise<T>): Promise<T | undefined> {
  try {
    return await read();
  } catch (error) {
    if (error instanceof IpnKitError && error.code === 'IPN_NOT_DURABLE') return undefined;
    throw error;
  }
}

function confirmationOf(query: URLSearchParams): Confirmation | undefined {
  const action = query.get('action');
  if (action === 'replay') {
    const key = query.get('key') ?? '';
    return { action, question: `Replay ${key}? Its listeners run again.`, fields: { key } };
  }
  if (action === 'replay-dead')
    return { action, question: 'Replay every dead entry? Their listeners run again.', fields: {} };
  if (action === 'purge') {
    return {
      action,
      question: 'Purge delivered entries? Their resends will then be new notifications.',
      fields: {},
      input: { name: 'before', label: 'Delivered before', type: 'date' },
    };
  }
  if (action === 'reconcile') {
    const transaction = (query.get('transaction') ?? '').trim();
    return {
      action,
      question: `Ask the service for ${transaction} and deliver it if final?`,
      fields: { transaction },
    };
  }
  return undefined;
}

function filtersOf(query: URLSearchParams): ListOptions {
  const status = query.get('status') ?? '';
  const transaction = (query.get('transaction') ?? '').trim();
  const text = (query.get('q') ?? '').trim();
  const from = dateOf(query.get('from'));
  const to = dateOf(query.get('to'));
  return {
    ...(STATUSES.has(status) ? { status: status as DeliveryStatus } : {}),
    ...(transaction ? { transactionId: transaction } : {}),
    ...(text ? { customDataContains: text } : {}),
    ...(from ? { receivedFrom: from } : {}),
    ...(to ? { receivedBefore: new Date(to.getTime() + DAY) } : {}),
  };
}

/** A `YYYY-MM-DD` date (UTC midnight), or `undefined`; never a rolled-over one (`2026-02-31` is no date). */
function dateOf(value: string | null | undefined): Date | undefined {
  if (!value || !/^\d{4}-\d{2}-\d{2}$/.test(value)) return undefined;
  const date = new Date(`${value}T00:00:00.000Z`);
  return !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 10) === value ? date : undefined;
}

function keep(query: URLSearchParams, names: string[]): URLSearchParams {
  const kept = new URLSearchParams();
  for (const name of names) {
    const value = query.get(name);
    if (value) kept.set(name, value);
  }
  return kept;
}

function describe(error: unknown): string {
  if (error instanceof IpnKitError) return `${error.code}: ${error.message}`;
  return 'the action failed: see the application log';
}

function stripSlash(path: string): string {
  return path.endsWith('/') ? path.slice(0, -1) : path;
}

function isSecure(req: IncomingMessage): boolean {
  return (
    (req.socket as { encrypted?: boolean }).encrypted === true || req.headers['x-forwarded-proto'] === 'https'
  );
}

function send(
  res: ServerResponse,
  status: number,
  body: string,
  type = 'text/html; charset=utf-8',
  extra?: Record<string, string>,
): void {
  if (res.headersSent) return;
  res.writeHead(status, {
    ...HEADERS,
    ...extra,
    'Content-Type': type,
    'Content-Length': Buffer.byteLength(body),
  });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}
