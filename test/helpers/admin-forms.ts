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
