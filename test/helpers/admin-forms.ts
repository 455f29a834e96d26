import { adminFetchHandler } from '../../lib/admin.js';
import { ipnRouter } from '../../lib/index.js';
import type { DurableStore } from '../../lib/stores/store.js';
import { uniquePayload } from './payloads.js';
import { quiet } from './quiet-logger.js';
import { eventually } from './services.js';

/** The operator's page as a browser drives it, over `adminFetchHandler()`: confirmation pages and their forms. */

/** The inbox key of a notification payload: `transaction_id:state`. */
export const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;

/** The notification request of `payload`, as the service sends it. */
export const notification = (payload: Record<string, unknown>) =>
  new Request('http://shop.test/ipn', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(payload),
  });

/**
 * Opens the confirmation page `/confirm?<query>` of `admin` (`edit` may change its form) and resolves a
 * function that posts its form as the browser does, again at each call (a refresh of the result page, a
 * second click, resubmits it), to `admin` or to `to` (another instance's page, behind the same load balancer).
 */
export async function confirmed(
  admin: (request: Request) => Promise<Response>,
  query: string,
  edit: (form: URLSearchParams) => void = () => {},
) {
  const confirm = await admin(new Request(`http://shop.test/confirm?${query}`));
  expect(confirm.status).toBe(200);
  const cookie = (confirm.headers.get('set-cookie') ?? '').split(';')[0]!;
  const page = await confirm.text();
  const action = /<form method="post" action="([^"]+)"/.exec(page)![1]!;
  const form = new URLSearchParams(
    [...page.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"/g)].map(
      ([, name, value]): [string, string] => [name!, unescape(value!)],
    ),
  );
  edit(form);
  return (to = admin) =>
    to(
      new Request(`http://shop.test${action}`, {
        method: 'POST',
        headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
        body: form.toString(),
      }),
    );
}

/** An attribute's text as the page escaped it. */
const unescape = (text: string) =>
  text
    .replace(/&#(\d+);/g, (_, code: string) => String.fromCharCode(Number(code)))
    .replace(/&quot;/g, '"')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&');

/**
 * A router over `store` (at least once, `options` added) with one notification in it, `dead` (its listener
 * failed its one attempt, then is made healthy) or `delivered`, and the operator's page over that router.
 * `credited` lists each transaction id the listener credited. Close `ipn` when done.
 */
export async function pageWithEntry(
  store: DurableStore,
  status: 'dead' | 'delivered',
  options: { retryDelayMs?: number } = {},
) {
  const ipn = ipnRouter({
    store,
    delivery: 'at-least-once',
    logger: quiet,
    recoveryIntervalMs: 20,
    ...(status === 'dead' ? { maxAttempts: 1 } : {}),
    ...options,
  });
  const credited: string[] = [];
  let healthy = status === 'delivered';
  ipn.on('successful', (n) => {
    if (!healthy) throw new Error('ledger down');
    credited.push(n.transaction_id);
  });
  const admin = adminFetchHandler({ ipn, authorize: () => ({ actor: 'ada' }) });
  const payload = uniquePayload();
  const key = keyOf(payload);
  try {
    expect((await ipn.fetch(notification(payload))).status).toBe(200);
    await eventually(status, async () => (await store.get(key))?.status === status);
  } catch (error) {
    await ipn.close();
    throw error;
  }
  healthy = true;
  return { ipn, admin, payload, key, credited };
}
