import type { IpnMetrics } from '../observability/metrics.js';
import type { Protection } from '../observability/unprotected-warning.js';
import type { InboxEntry, ListOptions, StatusCounts } from '../stores/store.js';
import type { RecentEvent } from './event-ring.js';
import { html, when, type Html } from './html.js';
import { isConflict, labelOf } from '../delivery/kept-unexpected.js';
import { progressText, type ReplayProgress } from '../delivery/bulk-replay.js';

/** What the pages need to mask the customer. */
export interface Masker {
  record(value: Record<string, unknown>): Record<string, unknown>;
  text(value: string, of: Record<string, unknown> | undefined): string;
}

/** Everything the main page shows. */
export interface Overview {
  base: string;
  /** `undefined` in at-most-once mode (no durable inbox). */
  inbox?: {
    counts: StatusCounts | undefined;
    lastHour: StatusCounts | undefined;
    entries: InboxEntry[];
    filters: ListOptions;
    page: number;
    hasNext: boolean;
    query: URLSearchParams;
    /** Whether delivery is paused (`ipn.pause()`), as this instance last read it. */
    paused?: boolean;
    /** The newest bulk replay of the last day, and where its entries stand. */
    replay?: LatestReplay | undefined;
  };
  metrics: IpnMetrics;
  recent: readonly RecentEvent[];
  mask: Masker;
  /** How the router stands against forged notifications; `undefined` when the page cannot tell. */
  protection?: Protection | undefined;
}

/** A bulk replay as the main page shows it: who, when, and where its entries stand now. */
export interface LatestReplay {
  at: Date;
  actor: string;
  progress: ReplayProgress;
}

const STATUSES = ['received', 'delivered', 'failed', 'dead'] as const;

function replayProgressNotice(replay: LatestReplay | undefined): Html | string {
  if (replay === undefined) return '';
  const { progress } = replay;
  const tone = progress.dead > 0 ? 'bad' : '';
  return html`<p class="notice ${tone}" id="replay-progress">
    Bulk replay by ${replay.actor}, ${when(replay.at)}: ${progressText(progress)}.
  </p>`;
}

/** A field's value as text: strings as they are, anything else as JSON. */
const textOf = (value: unknown): string =>
  typeof value === 'string' ? value : (JSON.stringify(value) ?? '');

const badge = (status: string): Html => html`<span class="status status-${status}">${status}</span>`;
/** An entry's status, and for a kept unexpected notification or a conflict the label that tells it apart. */
function statusOf(entry: InboxEntry): Html {
  const label = labelOf(entry);
  if (label === undefined) return badge(entry.status);
  const kind = isConflict(entry) ? 'conflict' : 'kept-unexpected';
  return html`${badge(entry.status)} <span class="status ${kind}">${label}</span>`;
}

function countCards(counts: StatusCounts | undefined, lastHour: StatusCounts | undefined): Html {
  if (!counts) return html`<p class="notice">This store does not count its entries.</p>`;
  return html`<div class="cards">
    ${STATUSES.map(
      (status) =>
        html`<div class="card" data-count="${status}">
          <small>${status}</small><b>${counts[status]}</b
          ><small>${lastHour?.[status] ?? 0} in the last hour</small>
        </div>`,
    )}
  </div>`;
}

function metricCards(metrics: IpnMetrics): Html {
  const queries = metrics.statusQueries;
  const cards: Array<[string, number | string]> = [
    ['received', metrics.received],
    ['duplicates', metrics.duplicates],
    ['invalid', metrics.invalid],
    ['rejected', metrics.rejected],
    ['emitted SUCCESSFUL', metrics.emitted.SUCCESSFUL],
    ['emitted FAILED', metrics.emitted.FAILED],
    ['listener errors', metrics.listenerErrors],
    ['store errors', metrics.storeErrors],
    ['dead', metrics.dead],
    ['conflicts', metrics.conflicts],
  ];
  if (queries) {
    cards.push(['status queries', queries.made], ['queries refused', queries.refused]);
    if (queries.budgetLeft !== undefined) cards.push(['query budget left (this minute)', queries.budgetLeft]);
  }
  return html`<div class="cards">
    ${cards.map(
      ([name, value]) =>
        html`<div class="card" data-metric="${name}"><small>${name}</small><b>${value}</b></div>`,
    )}
  </div>`;
}

function filterForm(base: string, filters: ListOptions, query: URLSearchParams): Html {
  const option = (value: string, label: string) =>
    html`<option
      value="${value}"
      ${filters.status === value || (!filters.status && !value) ? html`selected` : ''}
    >
      ${label}
    </option>`;
  return html`<form class="filters" method="get" action="${base}/">
    <label
      >Status<select name="status">
        ${option('', 'any')}${STATUSES.map((status) => option(status, status))}
      </select></label
    >
    <label
      >Transaction id<input name="transaction" value="${query.get('transaction') ?? ''}" autocomplete="off"
    /></label>
    <label>Text in custom_data<input name="q" value="${query.get('q') ?? ''}" autocomplete="off" /></label>
    <label>Received from<input type="date" name="from" value="${query.get('from') ?? ''}" /></label>
    <label>Received before<input type="date" name="to" value="${query.get('to') ?? ''}" /></label>
    <button type="submit">Filter</button> <a class="button secondary" href="${base}/">Clear</a>
  </form>`;
}

function entryRows(base: string, entries: InboxEntry[]): Html {
  if (entries.length === 0) return html`<p class="notice">No notification matches.</p>`;
  return html`<div class="wrap">
    <table id="entries">
      <thead>
        <tr>
          <th>Received</th>
          <th>Transaction</th>
          <th>State</th>
          <th>Status</th>
          <th class="optional">Attempts</th>
          <th class="optional">custom_data</th>
        </tr>
      </thead>
      <tbody>
        ${entries.map(
          (entry) =>
            html`<tr data-key="${entry.key}">
              <td>${when(entry.receivedAt)}</td>
              <td><a href="${base}/entry?key=${encodeURIComponent(entry.key)}">${entry.transactionId}</a></td>
              <td>${entry.state}</td>
              <td>${statusOf(entry)}</td>
              <td class="optional">${entry.attempts}</td>
              <td class="optional">${textOf(entry.record.custom_data)}</td>
            </tr>`,
        )}
      </tbody>
    </table>
  </div>`;
}

function recentEvents(events: readonly RecentEvent[], mask: Masker): Html {
  if (events.length === 0)
    return html`<p class="notice">No rejected notification and no error since the app started.</p>`;
  return html`<div class="wrap">
    <table id="recent">
      <thead>
        <tr>
          <th>When</th>
          <th>Event</th>
          <th>Transaction</th>
          <th>Reason</th>
          <th>Message</th>
        </tr>
      </thead>
      <tbody>
        ${events.map(
          (event) =>
            html`<tr>
              <td>${when(event.at)}</td>
              <td>${event.kind}</td>
              <td>${event.transactionId ?? '—'} ${event.state ?? ''}</td>
              <td>${event.reason}</td>
              <td>${mask.text(event.message, event.notification)}</td>
            </tr>`,
        )}
      </tbody>
    </table>
  </div>`;
}

/** The main page: counts, metrics, the filtered list (durable inbox), recent rejections and errors, actions. */
export function overviewPage(view: Overview): Html {
  const { base, inbox } = view;
  const paging = (page: number): string => {
    const query = new URLSearchParams(inbox?.query);
    query.set('page', String(page));
    return `${base}/?${query.toString()}`;
  };
  const inboxPart = inbox
    ? html`<h2>Inbox</h2>
        ${countCards(inbox.counts, inbox.lastHour)} ${replayProgressNotice(inbox.replay)}
        ${
          inbox.paused
            ? html`<p class="notice bad" id="paused">
                Delivery is paused: notifications are stored and answered 200, none is delivered until you
                resume.
              </p>`
            : ''
        }
        <div class="actions">
          <a class="button secondary" href="${base}/confirm?action=replay-dead">Replay every dead entry…</a>
          <a class="button secondary" id="replay-filter" href="${base}/confirm?${replayQuery(inbox.query)}"
            >Replay what this filter shows…</a
          >
          <a class="button secondary" href="${base}/confirm?action=purge">Purge delivered entries…</a>
          <a class="button secondary" href="${base}/audit" id="audit-link">Audit trail</a>
          <a
            class="button secondary"
            id="pause-toggle"
            href="${base}/confirm?action=${inbox.paused ? 'resume' : 'pause'}"
            >${inbox.paused ? 'Resume delivery…' : 'Pause delivery…'}</a
          >
        </div>
        ${filterForm(base, inbox.filters, inbox.query)}${entryRows(base, inbox.entries)}
        <nav class="pages">
          ${inbox.page > 1 ? html`<a class="button secondary" href="${paging(inbox.page - 1)}">← Newer</a>` : ''}${inbox.hasNext ? html`<a class="button secondary" href="${paging(inbox.page + 1)}">Older →</a>` : ''}
        </nav>`
    : html`<p class="notice">
        At-most-once mode: no durable inbox to list. The counters and the recent rejections and errors below
        are this process's since it started.
      </p>`;
  return html`<h1>Payment notifications</h1>
    ${protectionNotice(view.protection)}${inboxPart}
    <h2>Reconcile a transaction by hand</h2>
    <form class="filters" method="get" action="${base}/confirm">
      <input type="hidden" name="action" value="reconcile" /><label
        >Transaction id<input name="transaction" required autocomplete="off" /></label
      ><button type="submit">Reconcile…</button>
    </form>
    <h2>Router metrics (this process)</h2>
    ${metricCards(view.metrics)}
    <h2>Recent rejections and errors (this process)</h2>
    ${recentEvents(view.recent, view.mask)}`;
}

/** The confirmation address of "replay what this filter shows": the list's filters, without its page. */
function replayQuery(query: URLSearchParams): string {
  const kept = new URLSearchParams(query);
  kept.delete('page');
  kept.set('action', 'replay-filter');
  return kept.toString();
}

/** The router's unprotected state, said first: it is why a forged payment could be credited. */
function protectionNotice(protection: Protection | undefined): Html | string {
  if (protection === 'unprotected')
    return html`<p class="notice bad" id="unprotected">
      Unprotected: this IPN endpoint has no <code>secret</code>, no <code>authenticate</code>, no
      <code>verify</code> and no expectations in use, so anyone who learns its address can post a SUCCESSFUL
      notification and have an order credited. Give the service the address
      <code>ipnUrl(yourUrl, secret)</code> builds with the router's <code>secret</code>, or call
      <code>ipn.expect()</code> at each initiation.
    </p>`;
  if (protection === 'acknowledged')
    return html`<p class="notice" id="unprotected">
      Unprotected, acknowledged (<code>acknowledgeUnprotected: true</code>): every notification posted to this
      endpoint is believed. For tests and local demos only.
    </p>`;
  return '';
}

/** One entry: its record (masked), attempts, last error, timeline, and its replay. */
export function entryPage(base: string, entry: InboxEntry, mask: Masker): Html {
  const timeline: Array<[string, Date | null]> = [
    ['received', entry.receivedAt],
    ['last change', entry.updatedAt],
    ['next attempt', entry.status === 'received' || entry.status === 'failed' ? entry.nextAttemptAt : null],
    ['delivered', entry.deliveredAt],
    ['leased until', entry.leaseUntil],
  ];
  return html`<h1>${entry.transactionId} ${entry.state} ${statusOf(entry)}</h1>
    <div class="actions">
      <a class="button" href="${base}/confirm?action=replay&key=${encodeURIComponent(entry.key)}">Replay…</a>
      <a class="button secondary" href="${base}/">Back</a>
    </div>
    <div class="wrap">
      <table>
        <tbody>
          <tr>
            <th>Key</th>
            <td>${entry.key}</td>
          </tr>
          <tr>
            <th>Attempts</th>
            <td id="attempts">${entry.attempts}</td>
          </tr>
          <tr>
            <th>Last error</th>
            <td id="last-error">
              ${entry.lastError === null ? '—' : mask.text(entry.lastError, entry.record)}
            </td>
          </tr>
          ${timeline.map(
            ([name, at]) =>
              html`<tr>
                <th>${name}</th>
                <td>${when(at)}</td>
              </tr>`,
          )}
        </tbody>
      </table>
    </div>
    <h2>Record</h2>
    <pre id="record">${JSON.stringify(mask.record(entry.record), null, 2)}</pre>`;
}

/** What each action asks before it runs. */
export interface Confirmation {
  action: 'replay' | 'replay-dead' | 'replay-filter' | 'purge' | 'reconcile' | 'pause' | 'resume';
  question: string;
  fields: Record<string, string>;
  /** A field the operator fills in on the confirmation page (the purge's date). */
  input?: { name: string; label: string; type: string };
  /** A box the operator may tick on the confirmation page (the purge's inside the dedupe window), unticked. */
  check?: { name: string; label: string };
}

/** The confirmation step of an action: a POST form carrying the CSRF token. */
export function confirmPage(base: string, csrf: string, confirmation: Confirmation): Html {
  const { action, question, fields, input, check } = confirmation;
  return html`<h1>${question}</h1>
    <form method="post" action="${base}/${action}" class="filters">
      <input type="hidden" name="csrf" value="${csrf}" />
      ${Object.entries(fields).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}" />`)}
      ${input ? html`<label>${input.label}<input type="${input.type}" name="${input.name}" required /></label>` : ''}
      ${check ? html`<label><input type="checkbox" name="${check.name}" value="yes" />${check.label}</label>` : ''}
      <button type="submit" class="${action === 'purge' ? 'danger' : ''}" id="confirm">Confirm</button>
      <a class="button secondary" href="${base}/">Cancel</a>
    </form>`;
}

/** The visible result of an action. */
export function resultPage(base: string, message: string, ok: boolean, link?: string): Html {
  return html`<h1>${ok ? 'Done' : 'Not done'}</h1>
    <p class="notice ${ok ? '' : 'bad'}" id="result">${message}</p>
    <div class="actions">
      ${link ? html`<a class="button" href="${link}">See the entry</a>` : ''}
      <a class="button secondary" href="${base}/">Back to the list</a>
    </div>`;
}
