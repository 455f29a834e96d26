import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { adminRouter } from '../../lib/admin.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { EXPRESS_VERSIONS, listen, settle, type Running } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

const running: Running[] = [];
const routers: IpnRouter[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((server) => server.close()));
  await Promise.all(routers.splice(0).map((router) => router.close()));
});

describe('adminRouter() refuses to be created unsafely', () => {
  test('without authorize it throws a TypeError that says why', () => {
    const ipn = ipnRouter({ logger: quiet });
    routers.push(ipn);
    expect(() => adminRouter({ ipn } as never)).toThrow(/authorize is required/);
    expect(() => adminRouter({ ipn, authorize: true } as never)).toThrow(TypeError);
  });

  test('without a router, with an unknown option, or a bad page size it throws a TypeError', () => {
    const ipn = ipnRouter({ logger: quiet });
    routers.push(ipn);
    const authorize = () => true;
    expect(() => adminRouter({ authorize } as never)).toThrow(/ipn is required/);
    expect(() => adminRouter({ ipn, authorize, pagesize: 5 } as never)).toThrow(/unknown option pagesize/);
    expect(() => adminRouter({ ipn, authorize, pageSize: 0 })).toThrow(/pageSize/);
  });
});

describe.each(EXPRESS_VERSIONS)('the operator page in at-most-once mode (%s)', (_, express) => {
  async function start(
    options: { logCustomerData?: boolean; allow?: () => boolean | Promise<boolean> } = {},
  ) {
    const ipn = ipnRouter({ logger: quiet });
    routers.push(ipn);
    ipn.on('successful', (n) => {
      throw new Error(`no account for ${String(n.destination)}`);
    });
    const app = express();
    app.use('/ipn', ipn);
    const allow = options.allow ?? (() => true);
    app.use('/admin', adminRouter({ ipn, authorize: allow, logCustomerData: options.logCustomerData }));
    const server = await listen(app);
    running.push(server);
    return { ipn, server };
  }

  test('shows the metrics and the recent errors, the customer masked, and says there is no inbox', async () => {
    const { ipn, server } = await start();
    const payload = uniquePayload();
    await fetch(`${server.url}/ipn`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(payload),
    });
    await until(() => ipn.metrics().listenerErrors === 1, 'the listener error');
    const page = await fetch(`${server.url}/admin/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    const text = await page.text();
    expect(text).toContain('At-most-once mode');
    expect(text).toContain('data-metric="received"><small>received</small><b>1</b>');
    expect(text).toContain(String(payload.transaction_id));
    expect(text).toContain('no account for [redacted]');
    expect(text).not.toContain(String(payload.destination));
  });

  test('with logCustomerData the customer number is shown', async () => {
    const { ipn, server } = await start({ logCustomerData: true });
    const payload = uniquePayload();
    await fetch(`${server.url}/ipn`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(payload),
    });
    await until(() => ipn.metrics().listenerErrors === 1, 'the listener error');
    expect(await (await fetch(`${server.url}/admin/`)).text()).toContain(String(payload.destination));
  });

  test('authorize that throws or rejects answers 403, never the page', async () => {
    for (const allow of [
      () => {
        throw new Error('session store down');
      },
      () => Promise.reject(new Error('session store down')),
      () => 'yes' as unknown as boolean,
    ]) {
      const { server } = await start({ allow });
      const page = await fetch(`${server.url}/admin/`);
      expect(page.status).toBe(403);
      expect(await page.text()).not.toContain('Payment notifications</h1>');
    }
  });

  test('serves its own style sheet, answers 404 for an unknown page and 405 for another method', async () => {
    const { server } = await start();
    const css = await fetch(`${server.url}/admin/admin.css`);
    expect(css.headers.get('content-type')).toBe('text/css; charset=utf-8');
    expect((await fetch(`${server.url}/admin/nope`)).status).toBe(404);
    const put = await fetch(`${server.url}/admin/`, { method: 'PUT' });
    expect(put.status).toBe(405);
    expect(put.headers.get('allow')).toBe('GET, HEAD, POST');
    await settle();
  });
});

describe('examples/admin-page.ts (quoted in the docs)', () => {
  test('asks for the password, and shows the page with it', async () => {
    const { default: express } = await import('express');
    const { mountAdminPage } = await import('../../examples/admin-page.js');
    const ipn = ipnRouter({ logger: quiet });
    routers.push(ipn);
    const app = express();
    mountAdminPage(app, ipn, 'correct horse');
    const server = await listen(app);
    running.push(server);
    const denied = await fetch(`${server.url}/ops/ipn/`);
    expect(denied.status).toBe(401);
    expect(denied.headers.get('www-authenticate')).toBe('Basic realm="ipn"');
    const wrong = `Basic ${Buffer.from('operator:wrong').toString('base64')}`;
    expect((await fetch(`${server.url}/ops/ipn/`, { headers: { authorization: wrong } })).status).toBe(401);
    const right = `Basic ${Buffer.from('operator:correct horse').toString('base64')}`;
    const page = await fetch(`${server.url}/ops/ipn/`, { headers: { authorization: right } });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('Payment notifications</h1>');
  });
});
