import { detailText } from '../delivery/audit.js';
import type { AuditEntry } from '../stores/store.js';
import { html, when, type Html } from './html.js';

/**
 * The operator actions the store keeps (replay, purge, pause...), newest first: who, when, what. `entries`
 * is `undefined` when the router has no durable inbox (at-most-once mode): nothing is kept then.
 */
export function auditPage(
  base: string,
  entries: AuditEntry[] | undefined,
  page: number,
  hasNext: boolean,
): Html {
  const back = html`<a class="button secondary" href="${base}/">Back to the list</a>`;
  if (entries === undefined) {
    return html`<h1>Audit trail</h1>
      <p class="notice">At-most-once mode: no durable store keeps operator actions.</p>
      ${back}`;
  }
  const rows = entries.map(
    (entry) =>
      html`<tr>
        <td>${when(entry.at)}</td>
        <td class="actor">${entry.actor}</td>
        <td class="action">${entry.action}</td>
        <td><code>${detailText(entry.detail)}</code></td>
      </tr>`,
  );
  const table =
    entries.length === 0
      ? html`<p class="notice" id="no-actions">No operator action recorded yet.</p>`
      : html`<div class="wrap">
          <table id="audit">
            <thead>
              <tr>
                <th>When</th>
                <th>Who</th>
                <th>Action</th>
                <th>What</th>
              </tr>
            </thead>
            <tbody>
              ${rows}
            </tbody>
          </table>
        </div>`;
  return html`<h1>Audit trail</h1>
    ${table}
    <nav class="pages">
      ${page > 1 ? html`<a class="button secondary" href="${base}/audit?page=${page - 1}">← Newer</a>` : ''}${hasNext ? html`<a class="button secondary" href="${base}/audit?page=${page + 1}">Older →</a>` : ''}
    </nav>
    ${back}`;
}
