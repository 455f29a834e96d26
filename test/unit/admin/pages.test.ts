import { createMasker } from '../../../lib/admin/mask.js';
import { confirmPage, entryPage, overviewPage, resultPage } from '../../../lib/admin/pages.js';
import { layout } from '../../../lib/admin/html.js';
import type { InboxEntry } from '../../../lib/index.js';

// Every value that comes from a notification, an error or the query string is HTML-escaped on every page:
// a payload cannot add an element or an attribute, nor close the one it is in.

const EVIL = `"'><script>alert(1)</script><img src=x onerror=alert(2)>`;
const CUSTOMER = '0700000001';

const record = {
  transaction_id: EVIL,
  state: EVIL,
  custom_data: EVIL,
  destination: CUSTOMER,
  customer_name: EVIL,
  error: EVIL,
  response: EVIL,
  [EVIL]: EVIL,
};
const entry: InboxEntry = {
  key: `${EVIL}:${EVIL}`,
  transactionId: EVIL,
  state: EVIL,
  record,
  status: 'dead',
  attempts: 3,
  lastError: `${EVIL} for ${CUSTOMER}`,
  receivedAt: new Date(0),
  updatedAt: new Date(0),
  nextAttemptAt: new Date(0),
  deliveredAt: null,
  leaseUntil: null,
};
const metrics = {
  received: 1,
  duplicates: 0,
  invalid: 0,
  emitted: { SUCCESSFUL: 0, FAILED: 0, other: 0 },
  rejected: 1,
  listenerErrors: 0,
  storeErrors: 0,
  verificationErrors: 0,
  deliveryAttempts: 0,
  dead: 1,
  statusQueries: { made: 1, refused: 0, cached: 0, shared: 0, budgetLeft: 4 },
} as Parameters<typeof overviewPage>[0]['metrics'];

/** What an injection would leave in the markup: a tag or an event handler attribute of the payload's own. */
function injected(markup: string): string[] {
  return [/<script/i, /<img/i, /"'>/].filter((pattern) => pattern.test(markup)).map(String);
}

const mask = createMasker(false);
const pages: Array<[string, string]> = [
  [
    'the overview',
    overviewPage({
      base: '/ops',
      inbox: {
        counts: { received: 0, delivered: 0, failed: 0, dead: 1 },
        lastHour: { received: 0, delivered: 0, failed: 0, dead: 1 },
        entries: [entry],
        filters: {},
        page: 2,
        hasNext: true,
        query: new URLSearchParams({ transaction: EVIL, q: EVIL, from: EVIL, to: EVIL, status: EVIL }),
      },
      metrics,
      recent: [
        {
          at: new Date(0),
          kind: 'rejected',
          transactionId: EVIL,
          state: EVIL,
          reason: EVIL,
          message: `${EVIL} ${CUSTOMER}`,
          notification: record,
        },
      ],
      mask,
    }).text,
  ],
  ['an entry', entryPage('/ops', entry, mask).text],
  [
    'a confirmation',
    confirmPage('/ops', EVIL, { action: 'replay', question: EVIL, fields: { key: EVIL, [EVIL]: EVIL } }).text,
  ],
  ['a result', resultPage('/ops', EVIL, false, EVIL).text],
  ['the layout', layout(EVIL, '/ops', resultPage('/ops', 'ok', true))],
];

test.each(pages)('%s escapes every value: nothing is injected', (_name, markup) => {
  expect(injected(markup)).toEqual([]);
  expect(markup).toContain('&lt;script&gt;');
});

test.each(pages)('%s never shows the customer number', (_name, markup) => {
  expect(markup).not.toContain(CUSTOMER);
});
