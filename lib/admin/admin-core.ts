import { IpnKitError, messageOf, PurgeWindowError, StoreError } from '../shared/errors.js';
import type { DeliveryStatus, ListOptions } from '../stores/store.js';
import { keptKeys, type ReplayFilter } from '../delivery/bulk-replay.js';
import type { AdminOptions } from './admin-options.js';
import { csrfAllows, csrfCookie, newCsrfToken, readCsrfCookie } from './csrf.js';
import { createEventRing } from './event-ring.js';
import { layout, STYLE, type Html } from './html.js';
import { createMasker } from './mask.js';
import { protectionOf } from '../router/ipn-router.js';
import {
  confirmPage,
  entryPage,
  overviewPage,
  resultPage,
  type Confirmation,
  type LatestReplay,
} from './pages.js';
import { auditPage } from './audit-page.js';
import { replaysUnderWay } from './replays-under-way.js';
import { UNKNOWN_ACTOR } from '../delivery/audit.js';

/**
 * One request to the operator's page, as a transport adapter (node:http, fetch) reads it: the page's logic
 * sees only this, so every transport serves the same pages, headers, CSRF check and `authorize`.
 */
export interface AdminRequest<Req> {
  /** What `authorize` is given: the host's own request object (`IncomingMessage`, or a WHATWG `Request`). */
  raw: Req;
  method: string;
  /** The path and query below the mount path (`/entry?key=...`); `undefined` when the request is not below it. */
  target: string | undefined;
  /** The mount path, without a trailing slash (`/ops/ipn`, or `''`): the pages' links start with it. */
  base: string;
  /** The `Cookie` header. */
  cookie: string | undefined;
  /** The `Sec-Fetch-Site` header. */
  fetchSite: string | undefined;
  /** Whether the page is served over HTTPS (the CSRF cookie is then `Secure`). */
  secure: boolean;
  /** The urlencoded form of a POST, read up to 8 KiB; `undefined` when larger. */
  form(): Promise<URLSearchParams | undefined>;
}

/** The page's answer: status, headers (`Content-Type` among them) and body; the adapter writes it. */
export interface AdminAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** The operator's page without its transport: a request in, an answer out. Never rejects. */
export type AdminCore<Req> = (request: AdminRequest<Req>) => Promise<AdminAnswer>;

/** How many audit entries one read takes while looking for a bulk replay's confirmation already done. */
const ONCE_LOOKED_AT = 200;
/** How old a bulk replay's confirmation may be when sent: older, it is opened again (what it counted is stale). */
const ONCE_VALID_MS = 24 * 60 * 60 * 1000;
/** How far the store's clock (the audit trail's times) may be behind the page's, for that look. */
const CLOCKS_APART_MS = 10 * 60_000;
const STATUSES: ReadonlySet<string> = new Set<DeliveryStatus>(['received', 'delivered', 'failed', 'dead']);
const DAY = 24 * 60 * 60 * 1000;
/** How many of the newest audit actions the main page looks through for the newest bulk replay. */
const REPLAY_SHOWN = 20;
const HTML_TYPE = 'text/html; charset=utf-8';
const HEADERS = {
  'Content-Security-Policy':
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'X-Frame-Options': 'DENY',
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

/**
 * The page's logic, shared by `adminRouter()` (node:http, Express) and `adminFetchHandler()` (fetch): counts,
 * the filtered list of the durable inbox, each entry, the metrics and recent rejections, and the actions,
 * each confirmed, CSRF-protected and behind `authorize`.
 */
export function createAdminCore<Req>(resolved: AdminOptions<Req>): AdminCore<Req> {
  const { ipn, authorize, title, pageSize, logger } = resolved;
  const mask = createMasker(resolved.logCustomerData);
  const ring = createEventRing(ipn, resolved.recentEvents);
  const underWay = replaysUnderWay(ipn);

  const core: AdminCore<Req> = async (req) => {
    const { base } = req;
    try {
      return await respond(req, base);
    } catch (error) {
      // What failed underneath (the store, most likely): logged, and a page that says so, never a crash.
      logger.error(
        { err: { message: messageOf(error) }, path: (req.target ?? '').split('?')[0] },
        'ipn-kit admin: the page could not be built (the store failed?)',
      );
      const message =
        'The inbox could not be read or changed: see the application log, and retry in a moment.';
      return answer(503, page(base, resultPage(base, message, false)), undefined, { 'Retry-After': '5' });
    }
  };

  async function respond(req: AdminRequest<Req>, base: string): Promise<AdminAnswer> {
    const actor = await allowed(req.raw);
    if (actor === undefined) return answer(403, page(base, resultPage(base, 'Not authorised.', false)));
    if (req.target === undefined) return answer(404, page(base, resultPage(base, 'No such page.', false)));
    const url = parseUrl(req.target);
    if (url === undefined || hasNul(url.searchParams)) return badRequest(base);
    if (url.pathname === '/admin.css') return answer(200, STYLE, 'text/css; charset=utf-8');
    const { method } = req;
    if (method === 'GET' || method === 'HEAD') return get(req, base, url);
    if (method === 'POST') return post(req, base, url.pathname, actor);
    return answer(
      405,
      page(base, resultPage(base, `Method ${method} is not allowed here.`, false)),
      undefined,
      {
        Allow: 'GET, HEAD, POST',
      },
    );
  }

  /** Who the request is (`authorize`'s `actor`, or `'unknown'` after `true`), or `undefined` when not let in. */
  async function allowed(raw: Req): Promise<string | undefined> {
    try {
      const verdict = await authorize(raw);
      if (verdict === true) return UNKNOWN_ACTOR;
      const actor: unknown = typeof verdict === 'object' && verdict !== null ? verdict.actor : undefined;
      return typeof actor === 'string' && actor.trim() !== '' ? actor : undefined;
    } catch {
      return undefined; // a failing check never opens the page
    }
  }

  const page = (base: string, body: Html): string => layout(title, base, body);

  async function get(req: AdminRequest<Req>, base: string, url: URL): Promise<AdminAnswer> {
    let csrf = readCsrfCookie(req.cookie);
    const cookie = csrf === undefined ? csrfCookie((csrf = newCsrfToken()), req.secure) : undefined;
    const extra = cookie ? { 'Set-Cookie': cookie } : undefined;
    const { pathname, searchParams } = url;
    if (pathname === '/' || pathname === '') {
      return answer(200, page(base, await overview(base, searchParams)), undefined, extra);
    }
    if (pathname === '/entry') {
      const entry = await durable(() => ipn.inbox.get(searchParams.get('key') ?? ''));
      if (!entry) return answer(404, page(base, resultPage(base, 'No such entry.', false)), undefined, extra);
      return answer(200, page(base, entryPage(base, entry, mask)), undefined, extra);
    }
    if (pathname === '/audit') {
      const number = pageOf(searchParams);
      const options = { limit: pageSize + 1, offset: (number - 1) * pageSize };
      const actions = await durable(() => ipn.inbox.actions(options));
      const body = auditPage(base, actions?.slice(0, pageSize), number, (actions?.length ?? 0) > pageSize);
      return answer(200, page(base, body), undefined, extra);
    }
    if (pathname === '/confirm') {
      const confirmation = await confirmationOf(searchParams);
      if (!confirmation)
        return answer(400, page(base, resultPage(base, 'Unknown action.', false)), undefined, extra);
      return answer(200, page(base, confirmPage(base, csrf, confirmation)), undefined, extra);
    }
    return answer(404, page(base, resultPage(base, 'No such page.', false)), undefined, extra);
  }

  async function overview(base: string, query: URLSearchParams): Promise<Html> {
    const pageNumber = pageOf(query);
    const filters = filtersOf(query);
    const metrics = ipn.metrics();
    const recent = ring.recent();
    const protection = protectionOf(ipn);
    const entries = await durable(() =>
      ipn.inbox.list({
        ...filters,
        order: 'newest',
        limit: pageSize + 1,
        offset: (pageNumber - 1) * pageSize,
      }),
    );
    if (entries === undefined) return overviewPage({ base, metrics, recent, mask, protection });
    const [counts, lastHour, replay] = await Promise.all([
      ipn.inbox.countByStatus(),
      ipn.inbox.countByStatus(new Date(Date.now() - 60 * 60 * 1000)),
      latestReplay(),
    ]);
    const inbox = {
      counts,
      lastHour,
      entries: entries.slice(0, pageSize),
      filters,
      page: pageNumber,
      hasNext: entries.length > pageSize,
      query: keep(query, FILTERS),
      paused: ipn.inbox.isPaused(),
      replay,
    };
    return overviewPage({ base, inbox, metrics, recent, mask, protection });
  }

  async function post(
    req: AdminRequest<Req>,
    base: string,
    action: string,
    actor: string,
  ): Promise<AdminAnswer> {
    const form = await req.form();
    if (form === undefined) return answer(413, page(base, resultPage(base, 'The form is too large.', false)));
    if (hasNul(form)) return badRequest(base);
    if (!csrfAllows(req.cookie, req.fetchSite, form.get('csrf') ?? undefined)) {
      return answer(
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
      answer(ok ? 200 : 409, page(base, resultPage(base, message, ok, link)));
    /** Keeps the action in the audit trail, then says what was done: or that it was done, unrecorded. */
    const kept = async (
      name: string,
      detail: Record<string, unknown>,
      message: string,
      ok = true,
      link?: string,
    ) => {
      try {
        await ipn.inbox.recordAction({ action: name, actor, detail });
        return done(message, ok, link);
      } catch (error) {
        logger.error(
          { err: { message: messageOf(error) }, action },
          'ipn-kit admin: an action was not recorded',
        );
        return done(`${message} It could not be recorded in the audit trail: ${describe(error)}`, ok, link);
      }
    };
    /** One entry's replay, if it is still as its confirmation page showed it (`seen`, when the form says). */
    const replayOne = async (
      key: string,
      seen: { status: DeliveryStatus; at: number } | undefined,
      link: string,
    ): Promise<AdminAnswer> => {
      if (seen !== undefined) {
        const now = await ipn.inbox.get(key);
        if (now !== undefined && (now.status !== seen.status || now.updatedAt.getTime() !== seen.at)) {
          return done(changedSince(key, seen.status, now.status), false, link);
        }
      }
      const replayed = await ipn.inbox.replay(key, seen === undefined ? undefined : [seen.status]);
      if (replayed) {
        return kept('replay', { key, replayed }, `Replayed ${key}: it is delivered again now.`, true, link);
      }
      const now = seen === undefined ? undefined : await ipn.inbox.get(key);
      return now === undefined
        ? done(`No entry ${key} to replay.`, false)
        : done(changedSince(key, seen!.status, now.status), false, link);
    };
    try {
      if (action === '/replay') {
        const key = form.get('key') ?? '';
        const link = `${base}/entry?key=${encodeURIComponent(key)}`;
        // The entry as the operator confirmed it (its status and last change, from the confirmation page):
        // the same form sent again (a refresh of the result page, a second tab) finds it changed and replays
        // nothing, where it would have run a payment's listeners once more.
        const seen = seenOf(form);
        // The same form sent twice at once (a double click, two tabs): both would read the entry as confirmed
        // before either replayed it. The second is refused while the first is under way.
        const name = `key:${key}`;
        if (!underWay.take(name)) return done(underWayAlready(key), false, link);
        try {
          return await replayOne(key, seen, link);
        } finally {
          underWay.end(name, false);
        }
      }
      if (action === '/replay-dead') {
        const { replayed, keys } = await ipn.inbox.replayMatching({ status: 'dead' });
        const message = `Replayed ${replayed} dead entries: the list shows their progress.`;
        return kept('replay-dead', { count: replayed, ...keptKeys(keys) }, message);
      }
      if (action === '/replay-filter') {
        const filter = replayFilterOf(form);
        // Each confirmation is done once: the same form sent again (a refresh of the result page) finds its
        // mark in the audit trail, where the status filter delivered would run every payment's listeners again.
        // The mark is taken here first (synchronously): the same form sent again while the first is still
        // replaying (a second click, a resend after a proxy's timeout) finds it before the audit trail has it.
        const once = form.get('once') ?? undefined;
        const name = `once:${once}`;
        const issued = once === undefined ? undefined : issuedOf(once);
        if (issued !== undefined && !(Date.now() - issued <= ONCE_VALID_MS)) return done(TOO_OLD, false);
        if (once !== undefined && !underWay.take(name)) return done(DONE_ALREADY, false);
        let replaying = false;
        try {
          if (once !== undefined && (await doneAlready(once))) return done(DONE_ALREADY, false);
          replaying = true;
          const { matched, replayed, keys } = await ipn.inbox.replayMatching(filter);
          const message = `Replayed ${replayed} of the ${matched} entries the filter showed: the list shows their progress.`;
          const mark = once === undefined ? {} : { once };
          return await kept(
            'replay-filter',
            { filter, matched, count: replayed, ...mark, ...keptKeys(keys) },
            message,
          );
        } finally {
          if (once !== undefined) underWay.end(name, replaying);
        }
      }
      if (action === '/pause') {
        await ipn.inbox.pause();
        const message = 'Delivery is paused on every instance: notifications are stored, none is delivered.';
        return kept('pause', {}, message);
      }
      if (action === '/resume') {
        await ipn.inbox.resume();
        return kept('resume', {}, 'Delivery resumed: what arrived meanwhile is being delivered.');
      }
      if (action === '/purge') {
        const before = dateOf(form.get('before'));
        if (!before) return done('Give the date before which delivered entries are purged.', false);
        // Inside the dedupe window only when the operator ticked the box: ipn.inbox.purge refuses it else. The
        // audit trail says insideDedupeWindow only of a purge that went inside it (a refusal deletes nothing).
        const inside = form.get(INSIDE_WINDOW) === 'yes';
        let count: number;
        let entered = false;
        try {
          count = await ipn.inbox.purge(before, 'delivered');
        } catch (error) {
          if (!(error instanceof PurgeWindowError)) throw error;
          if (!inside) {
            const { dedupeWindowStart, ttlMs } = error;
            throw new PurgeWindowError(before, dedupeWindowStart, ttlMs, INSIDE_WINDOW_ANYWAY);
          }
          count = await ipn.inbox.purge(before, 'delivered', { insideDedupeWindow: true });
          entered = true;
        }
        const day = before.toISOString().slice(0, 10);
        const detail = { status: 'delivered', before: before.toISOString(), count };
        return kept(
          'purge',
          entered ? { ...detail, insideDedupeWindow: true } : detail,
          `Purged ${count} delivered entries delivered before ${day}.`,
        );
      }
      if (action === '/reconcile') {
        const id = (form.get('transaction') ?? '').trim();
        if (!id) return done('Give a transaction id.', false);
        const { record, emitted, rejected } = await ipn.reconcile(id);
        const outcome = emitted
          ? 'its notification was delivered now'
          : rejected
            ? 'nothing was delivered: the record contradicts its expectation (see the rejected event)'
            : 'nothing was delivered (not final yet, or already handled)';
        return done(`The service says ${id} is ${String(record.state)}: ${outcome}.`);
      }
    } catch (error) {
      // A failure underneath (a custom store's plain error, or a StoreError, which the stores reject with)
      // is logged; an answer of the service (a StatusError) is said on the page only.
      if (!(error instanceof IpnKitError) || error instanceof StoreError) {
        logger.error({ err: { message: messageOf(error) }, action }, 'ipn-kit admin: an action failed');
      }
      return done(describe(error), false);
    }
    return answer(404, page(base, resultPage(base, 'No such action.', false)));
  }

  function badRequest(base: string): AdminAnswer {
    const message =
      'The address or the form holds something no notification can hold (a NUL character, a broken URL).';
    return answer(400, page(base, resultPage(base, message, false)));
  }

  /** The request's path and query, or `undefined` for a target that is no URL (`//[`). */
  function parseUrl(target: string): URL | undefined {
    try {
      return new URL(target, 'http://admin.invalid');
    } catch {
      return undefined;
    }
  }

  /** A NUL character fits in no key, transaction id or `custom_data` (PostgreSQL's text refuses it). */
  function hasNul(values: URLSearchParams): boolean {
    for (const [name, value] of values) if (name.includes('\u0000') || value.includes('\u0000')) return true;
    return false;
  }

  /**
   * The newest bulk replay of the day (within the last `REPLAY_SHOWN` actions), with where its entries stand
   * now; `undefined` when there is none, or its keys were not kept.
   */
  async function latestReplay(): Promise<LatestReplay | undefined> {
    const actions = await ipn.inbox.actions({ limit: REPLAY_SHOWN });
    const newest = actions.find(
      (entry) => entry.action === 'replay-dead' || entry.action === 'replay-filter',
    );
    if (newest === undefined || Date.now() - newest.at.getTime() > DAY) return undefined;
    const keys = newest.detail.keys;
    if (!Array.isArray(keys) || !keys.every((key) => typeof key === 'string')) return undefined;
    return { at: newest.at, actor: newest.actor, progress: await ipn.inbox.replayProgress(keys) };
  }

  /**
   * Whether a bulk replay confirmed with the mark `once` is in the audit trail: every action kept since its
   * confirmation page was made (its mark says when) is looked through, however many other operators' actions
   * came meanwhile (a mark that says no time: the newest 200 only).
   */
  async function doneAlready(once: string): Promise<boolean> {
    const issued = issuedOf(once);
    for (let offset = 0; ; offset += ONCE_LOOKED_AT) {
      const actions = await ipn.inbox.actions({ limit: ONCE_LOOKED_AT, offset });
      if (actions.some((entry) => entry.action === 'replay-filter' && entry.detail.once === once))
        return true;
      if (issued === undefined || actions.length < ONCE_LOOKED_AT) return false;
      if (actions[actions.length - 1]!.at.getTime() < issued - CLOCKS_APART_MS) return false;
    }
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

  async function confirmationOf(query: URLSearchParams): Promise<Confirmation | undefined> {
    const action = query.get('action');
    if (action === 'replay') {
      const key = query.get('key') ?? '';
      // The entry as the operator sees it now: the replay is done only if it is still so when confirmed.
      const entry = await durable(() => ipn.inbox.get(key));
      const seen: Record<string, string> =
        entry === undefined ? {} : { was: entry.status, at: String(entry.updatedAt.getTime()) };
      const what = entry === undefined ? '' : ` (${entry.status} now)`;
      return { action, question: `Replay ${key}${what}? Its listeners run again.`, fields: { key, ...seen } };
    }
    if (action === 'replay-filter') {
      // The count first (a dry run), so that the operator knows what the button does.
      const filter = replayFilterOf(query);
      const { matched } = await ipn.inbox.replayMatching({ ...filter, dryRun: true });
      // A mark of this confirmation: the replay it confirms is done once (see `doneAlready`).
      const fields = { ...Object.fromEntries(keep(query, FILTERS)), once: `${Date.now()}.${newCsrfToken()}` };
      const what = `${matched} ${filter.status === undefined ? 'undelivered ' : ''}${matched === 1 ? 'entry' : 'entries'}`;
      const delivered =
        filter.status === undefined ? ' (delivered ones only with the status filter delivered)' : '';
      return {
        action,
        question: `Replay the ${what} this filter shows${delivered}? Their listeners run again, paced by replayRate.`,
        fields,
      };
    }
    return staticConfirmationOf(query);
  }

  return core;
}

/** The page number a query asks for, 1 to 10 000. */
function pageOf(query: URLSearchParams): number {
  return Math.max(1, Math.min(10_000, Number.parseInt(query.get('page') ?? '1', 10) || 1));
}

/** The list's filters, kept in its links and carried by "replay what this filter shows". */
const FILTERS = ['status', 'transaction', 'q', 'from', 'to'];

/** The list's filters as a bulk replay's (the same entries the list shows, on every page). */
function replayFilterOf(values: URLSearchParams): ReplayFilter {
  const { status, transactionId, customDataContains, receivedFrom, receivedBefore } = filtersOf(values);
  return {
    status,
    since: receivedFrom,
    until: receivedBefore,
    customDataContains,
    ...(transactionId === undefined ? {} : { transactionIds: [transactionId] }),
  };
}

function staticConfirmationOf(query: URLSearchParams): Confirmation | undefined {
  const action = query.get('action');
  if (action === 'pause')
    return {
      action,
      question: 'Pause delivery on every instance? Notifications are still stored and answered 200.',
      fields: {},
    };
  if (action === 'resume')
    return { action, question: 'Resume delivery? What arrived meanwhile is delivered now.', fields: {} };
  if (action === 'replay-dead')
    return { action, question: 'Replay every dead entry? Their listeners run again.', fields: {} };
  if (action === 'purge') {
    return {
      action,
      question:
        'Purge delivered entries? Their resends will then be new notifications, delivered (credited) again: ' +
        'a date inside the dedupe window (ttlMs, 7 days by default) is refused unless you tick the box.',
      fields: {},
      input: { name: 'before', label: 'Delivered before', type: 'date' },
      check: { name: INSIDE_WINDOW, label: INSIDE_WINDOW_LABEL },
    };
  }
  if (action === 'reconcile') {
    const transaction = (query.get('transaction') ?? '').trim();
    return {
      action,
      question: `Ask the service for ${transaction} and deliver it if final, unless it contradicts its expectation?`,
      fields: { transaction },
    };
  }
  return undefined;
}

/** The entry's status and last change as its replay's confirmation page saw them, when the form says. */
function seenOf(form: URLSearchParams): { status: DeliveryStatus; at: number } | undefined {
  const status = form.get('was') ?? '';
  const at = Number(form.get('at'));
  if (!STATUSES.has(status) || !Number.isSafeInteger(at)) return undefined;
  return { status: status as DeliveryStatus, at };
}

/** The purge's confirmation box: purge inside the dedupe window all the same. */
const INSIDE_WINDOW = 'inside-dedupe-window';
const INSIDE_WINDOW_LABEL =
  'Purge inside the dedupe window all the same (the service can no longer resend these notifications)';
/** How the operator asks for a purge inside the dedupe window, as the refusal says it. */
const INSIDE_WINDOW_ANYWAY = `confirm again with the box "${INSIDE_WINDOW_LABEL}" ticked`;

/** Why a bulk replay's confirmation sent again replayed nothing. */
const DONE_ALREADY =
  'This replay was done already, or is being done (the form was sent again): nothing more was replayed.';

/** Why a bulk replay's confirmation sent a day or more after it was made replayed nothing. */
const TOO_OLD =
  'This confirmation is more than a day old: nothing was replayed. Open the list again, and confirm what ' +
  'its filter shows now.';

/** When a bulk replay's confirmation mark (`<ms>.<random>`) was made; `undefined` when it says no time. */
function issuedOf(once: string): number | undefined {
  const match = /^(\d{1,15})\./.exec(once);
  return match === null ? undefined : Number(match[1]);
}

/** Why the second of one entry's replay sent twice at once was not done. */
function underWayAlready(key: string): string {
  return (
    `A replay of ${key} is under way already (the form was sent twice): nothing more was replayed. ` +
    'Open the entry to see where it stands.'
  );
}

/** Why a confirmed replay of `key` was not done: the entry changed since the confirmation page. */
function changedSince(key: string, was: DeliveryStatus, now: DeliveryStatus): string {
  return (
    `${key} changed since you confirmed its replay (${was === now ? `it is ${now} still, but was attempted again or replayed meanwhile` : `it was ${was}, it is ${now} now`}): nothing was replayed. ` +
    'Open the entry to see where it stands, and replay it from there if it still must be.'
  );
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

/** A mount path without its trailing slash: the pages' links append `/entry` and the like to it. */
export function stripSlash(path: string): string {
  return path.endsWith('/') ? path.slice(0, -1) : path;
}

function answer(status: number, body: string, type = HTML_TYPE, extra?: Record<string, string>): AdminAnswer {
  return { status, body, headers: { ...HEADERS, ...extra, 'Content-Type': type } };
}
