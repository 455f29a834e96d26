import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { adminFetchHandler } from '../../lib/admin.js';
import { mountAdminPage } from '../../examples/admin-page-fetch.js';
import { MemoryInbox } from '../helpers/memory-inbox.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { until } from '../helpers/until.js';

// adminFetchHandler(): the operator's page as a fetch handler, through a real Hono app on @hono/node-server.

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** Serves a Hono app on a free loopback port; returns its URL. */
async function serveHono(app: Hono): Promise<string> {
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const started = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(started));
  });
  closers.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function durableRouter(): { ipn: IpnRouter; inbox: MemoryInbox } {
  const inbox = new MemoryInbox();
  const ipn = ipnRouter({
    store: inbox,
    delivery: 'at-least-once',
    maxAttempts: 1,
    retryDelayMs: 5,
    recoveryIntervalMs: 20,
    logger: quiet,
  });
  closers.push(() => ipn.close());
  return { ipn, inbox };
}

describe('examples/admin-page-fetch.ts (quoted in docs/admin.md), Hono on @hono/node-server', () => {
  const password = 'correct horse';
  const authorization = `Basic ${Buffer.from(`operator:${password}`).toString('base64')}`;

  async function start() {
    const { ipn, inbox } = durableRouter();
    let ledgerUp = false;
    const delivered: string[] = [];
    ipn.on('successful', (n) => {
      if (!ledgerUp) throw new Error(`ledger down for ${String(n.destination)}`);
      delivered.push(n.transaction_id);
    });
    const app = new Hono();
    app.all('/ipn', (c) => ipn.fetch(c.req.raw));
    mountAdminPage(app, ipn, password);
    const url = await serveHono(app);
    // A notification whose listener fails: with maxAttempts 1 it is dead at once.
    const payload = uniquePayload({ destination: '22997000111', customer_name: 'Awa Secret-Name' });
    const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
    const sent = await fetch(`${url}/ipn`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(payload),
    });
    expect(sent.status).toBe(200);
    await until(() => inbox.entries.get(key)?.status === 'dead', 'the dead entry');
    return { ipn, inbox, url, payload, key, delivered, fixLedger: () => (ledgerUp = true) };
  }

  /** The text of an entry's own page. */
  const entryPage = async (url: string, key: string): Promise<string> =>
    (
      await fetch(`${url}/ops/ipn/entry?key=${encodeURIComponent(key)}`, { headers: { authorization } })
    ).text();

  test('renders the overview (200, HTML, security headers), the customer masked', async () => {
    const { url, payload } = await start();
    const page = await fetch(`${url}/ops/ipn/`, { headers: { authorization } });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    expect(page.headers.get('cache-control')).toBe('no-store');
    expect(page.headers.get('set-cookie')).toMatch(
      /^ipn_kit_admin_csrf=[\w-]{43}; Path=\/; HttpOnly; SameSite=Strict$/,
    );
    const text = await page.text();
    expect(text).toContain('Payment notifications</h1>');
    expect(text).toContain(String(payload.transaction_id));
    expect(text).toContain('href="/ops/ipn/entry?key=');
    expect(text).not.toContain('22997000111');
    expect(text).not.toContain('Secret-Name');
    // The entry's own page too, and the style sheet the page links to.
    const entry = await fetch(
      `${url}/ops/ipn/entry?key=${encodeURIComponent(`${String(payload.transaction_id)}:SUCCESSFUL`)}`,
      {
        headers: { authorization },
      },
    );
    expect(entry.status).toBe(200);
    const entryText = await entry.text();
    expect(entryText).toContain('ledger down for [redacted]');
    expect(entryText).not.toContain('22997000111');
    // The mount path itself, without its trailing slash, is the overview too.
    expect((await fetch(`${url}/ops/ipn`, { headers: { authorization } })).status).toBe(200);
    const css = await fetch(`${url}/ops/ipn/admin.css`, { headers: { authorization } });
    expect(css.headers.get('content-type')).toBe('text/css; charset=utf-8');
  });

  test('labels a kept unexpected notification on the overview and its own page: not credited, check and replay', async () => {
    const { url, inbox, key: plain } = await start();
    const kept = uniquePayload();
    const key = `${String(kept.transaction_id)}:SUCCESSFUL`;
    const lease = { id: 'hold', ms: 60_000 };
    await inbox.receive(key, kept, lease);
    const century = new Date(Date.now() + 100 * 365 * 24 * 60 * 60_000);
    await inbox.settle(key, lease.id, {
      status: 'failed',
      error: 'unexpected: no expectation',
      nextAttemptAt: century,
    });
    const label = 'unexpected: not credited, check and replay';
    const overview = await (await fetch(`${url}/ops/ipn/`, { headers: { authorization } })).text();
    expect(overview.split(label)).toHaveLength(2); // once: the dead entry is not labelled
    expect(await entryPage(url, key)).toContain(label);
    expect(await entryPage(url, plain)).not.toContain(label);
  });

  test('labels an entry kept as a conflict on the overview and its own page, and counts conflicts', async () => {
    const { url, fixLedger, key: plain, inbox } = await start();
    fixLedger();
    const paid = uniquePayload();
    const id = String(paid.transaction_id);
    const post = (body: object) =>
      fetch(`${url}/ipn`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    expect((await post(paid)).status).toBe(200);
    await until(() => inbox.entries.get(`${id}:SUCCESSFUL`)?.status === 'delivered', 'the SUCCESSFUL');
    // The service's FAILED after it: kept dead as a conflict, never emitted as failed.
    expect((await post({ ...paid, state: 'FAILED' })).status).toBe(200);
    const key = `${id}:FAILED`;
    await until(() => inbox.entries.get(key)?.lastError?.startsWith('conflict:') === true, 'the conflict');
    expect(inbox.entries.get(key)?.status).toBe('dead');
    const label = 'conflict: FAILED after an accepted SUCCESSFUL, not emitted as failed';
    const overview = await (await fetch(`${url}/ops/ipn/`, { headers: { authorization } })).text();
    // Once: the plain dead entry (its listener failed) is not labelled.
    expect(overview.split(label)).toHaveLength(2);
    expect(overview).toContain(`<span class="status conflict">${label}</span>`);
    expect(overview).toContain('data-metric="conflicts"><small>conflicts</small><b>1</b>');
    expect(await entryPage(url, key)).toContain(label);
    expect(await entryPage(url, plain)).not.toContain(label);
  });

  test('without authorization: 401 from the login, never the page', async () => {
    const { url } = await start();
    const denied = await fetch(`${url}/ops/ipn/`);
    expect(denied.status).toBe(401);
    expect(denied.headers.get('www-authenticate')).toBe('Basic realm="ipn"');
    expect(await denied.text()).not.toContain('Payment notifications</h1>');
    const wrong = `Basic ${Buffer.from('operator:wrong').toString('base64')}`;
    expect((await fetch(`${url}/ops/ipn/`, { headers: { authorization: wrong } })).status).toBe(401);
  });

  test('a POST without the CSRF token is refused and changes nothing; with it, the replay delivers', async () => {
    const { url, inbox, key, delivered, payload, fixLedger } = await start();
    fixLedger();
    const form = `key=${encodeURIComponent(key)}`;
    const headers = { authorization, 'content-type': 'application/x-www-form-urlencoded' };

    const confirm = await fetch(`${url}/ops/ipn/confirm?action=replay&key=${encodeURIComponent(key)}`, {
      headers: { authorization },
    });
    expect(confirm.status).toBe(200);
    const cookie = (confirm.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    const token = cookie.split('=')[1] ?? '';
    expect(await confirm.text()).toContain(`value="${token}"`);

    const noToken = await fetch(`${url}/ops/ipn/replay`, {
      method: 'POST',
      headers: { ...headers, cookie },
      body: form,
    });
    expect(noToken.status).toBe(403);
    expect(await noToken.text()).toContain('The form expired or came from another site');
    const noCookie = await fetch(`${url}/ops/ipn/replay`, {
      method: 'POST',
      headers,
      body: `csrf=${token}&${form}`,
    });
    expect(noCookie.status).toBe(403);
    const crossSite = await fetch(`${url}/ops/ipn/replay`, {
      method: 'POST',
      headers: { ...headers, cookie, 'sec-fetch-site': 'cross-site' },
      body: `csrf=${token}&${form}`,
    });
    expect(crossSite.status).toBe(403);
    expect(inbox.entries.get(key)?.status).toBe('dead');
    expect(delivered).toEqual([]);

    const replayed = await fetch(`${url}/ops/ipn/replay`, {
      method: 'POST',
      headers: { ...headers, cookie },
      body: `csrf=${token}&${form}`,
    });
    expect(replayed.status).toBe(200);
    expect(await replayed.text()).toContain(`Replayed ${key}`);
    await until(() => inbox.entries.get(key)?.status === 'delivered', 'the replayed entry delivered');
    expect(delivered).toEqual([payload.transaction_id]);
  });

  test('a form over 8 KiB answers 413', async () => {
    const { url } = await start();
    const big = await fetch(`${url}/ops/ipn/replay`, {
      method: 'POST',
      headers: { authorization, 'content-type': 'application/x-www-form-urlencoded' },
      body: `key=${'x'.repeat(9 * 1024)}`,
    });
    expect(big.status).toBe(413);
  });
});

describe('adminFetchHandler() itself', () => {
  async function start(authorize: (request: Request) => boolean | Promise<boolean>, basePath?: string) {
    const { ipn } = durableRouter();
    const admin = adminFetchHandler({ ipn, authorize, basePath });
    const app = new Hono();
    app.all('*', (c) => admin(c.req.raw));
    return serveHono(app);
  }

  test('authorize is given the WHATWG Request; false, a throw or a rejection answers 403', async () => {
    const seen: Request[] = [];
    const url = await start((request) => {
      seen.push(request);
      return request.headers.get('x-operator') === 'yes';
    }, '/ops');
    const allowed = await fetch(`${url}/ops/`, { headers: { 'x-operator': 'yes' } });
    expect(allowed.status).toBe(200);
    expect(seen[0]).toBeInstanceOf(Request);
    expect(seen[0]?.url).toBe(`${url}/ops/`);
    for (const path of ['/ops/', '/ops/admin.css', '/ops/entry?key=x']) {
      const denied = await fetch(`${url}${path}`);
      expect(denied.status).toBe(403);
      expect(denied.headers.get('content-security-policy')).toContain("default-src 'none'");
      expect(await denied.text()).not.toContain('Payment notifications</h1>');
    }
    expect((await fetch(`${url}/ops/replay-dead`, { method: 'POST', body: 'csrf=x' })).status).toBe(403);
    for (const authorize of [
      () => {
        throw new Error('session store down');
      },
      () => Promise.reject(new Error('session store down')),
      () => 'yes' as unknown as boolean,
    ]) {
      expect((await fetch(`${await start(authorize)}/`)).status).toBe(403);
    }
  });

  test('basePath: the page at it and below it, 404 outside it; 405 for another method; HEAD without a body', async () => {
    const url = await start(() => true, '/ops/ipn/');
    const root = await fetch(`${url}/ops/ipn`);
    expect(root.status).toBe(200);
    expect(await root.text()).toContain('href="/ops/ipn/admin.css"');
    expect((await fetch(`${url}/elsewhere/`)).status).toBe(404);
    expect((await fetch(`${url}/ops/ipnx/`)).status).toBe(404);
    expect((await fetch(`${url}/ops/ipn/nope`)).status).toBe(404);
    const put = await fetch(`${url}/ops/ipn/`, { method: 'PUT' });
    expect(put.status).toBe(405);
    expect(put.headers.get('allow')).toBe('GET, HEAD, POST');
    const head = await fetch(`${url}/ops/ipn/`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
  });

  test('refuses to be created without authorize or with a basePath that is no path', () => {
    const { ipn } = durableRouter();
    expect(() => adminFetchHandler({ ipn } as never)).toThrow(/adminFetchHandler: authorize is required/);
    expect(() => adminFetchHandler({ ipn, authorize: () => true, basePath: 'ops' })).toThrow(/basePath/);
    expect(() => adminFetchHandler({ ipn, authorize: () => true, basePath: '/ops?x' })).toThrow(TypeError);
  });
});
