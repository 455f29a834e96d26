import { adminFetchHandler } from '../../lib/admin.js';
import { ipnRouter, MemoryStore, type IpnRouter, type Logger, type Options } from '../../lib/index.js';
import { servedRouters } from '../helpers/servers.js';
import { uniquePayload } from '../helpers/payloads.js';
import { until } from '../helpers/until.js';

const serve = servedRouters();

/** A logger that keeps its warnings. */
function recording() {
  const warnings: string[] = [];
  const logger: Logger = {
    debug: () => {},
    info: () => {},
    warn: (_fields, message) => void warnings.push(message),
    error: () => {},
  };
  return {
    logger,
    unprotected: () => warnings.filter((line) => line.includes('believes every notification')),
  };
}

async function started(options: Partial<Options> = {}, before?: (ipn: IpnRouter) => Promise<void>) {
  const { logger, unprotected } = recording();
  const { ipn, post } = await serve(ipnRouter({ logger, ...options }));
  ipn.on('successful', () => {});
  await before?.(ipn);
  return { ipn, post, unprotected };
}

describe('a router that nothing protects from forged notifications', () => {
  test('logs one warning at its first request, naming the risk and each fix, and answers as usual', async () => {
    const { post, unprotected } = await started();
    await new Promise((resolve) => setImmediate(resolve));
    expect(unprotected()).toEqual([]); // building it (a `next build`, a Worker's global scope) says nothing

    expect((await post(uniquePayload())).status).toBe(200);
    expect((await post(uniquePayload())).status).toBe(200);
    expect(unprotected()).toHaveLength(1);
    const [line] = unprotected();
    expect(line).toContain('anyone who learns its address can POST a SUCCESSFUL notification');
    for (const fix of ['ipnUrl(', '`secret`', 'ipn.expect(', '`verify`', '`authenticate`'])
      expect(line).toContain(fix);
    expect(line).toContain('acknowledgeUnprotected: true');
  });

  test('acknowledgeUnprotected: true silences it', async () => {
    const { post, unprotected } = await started({ acknowledgeUnprotected: true });
    expect((await post(uniquePayload())).status).toBe(200);
    expect(unprotected()).toEqual([]);
  });

  test('a logger whose warn throws costs the request nothing', async () => {
    const logger: Logger = {
      debug: () => {},
      info: () => {},
      warn: () => {
        throw new Error('log sink down');
      },
      error: () => {},
    };
    const { ipn, post } = await serve(ipnRouter({ logger }));
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.transaction_id));
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await until(() => credited.length === 1, 'the notification');
  });

  test('an acknowledgeUnprotected that is not a boolean is a TypeError at construction', () => {
    expect(() => ipnRouter({ acknowledgeUnprotected: 'yes' as unknown as boolean })).toThrow(
      /acknowledgeUnprotected must be true or false/,
    );
  });
});

describe('a protected router logs no such warning', () => {
  // A status source is never asked here: the notification's verification may fail, the warning is the point.
  const source = { getStatus: () => Promise.reject(new Error('not asked in this test')) };

  test.each<[string, Partial<Options>]>([
    ['secret', { secret: 'a-long-enough-secret-for-the-ipn-url' }],
    ['authenticate', { authenticate: () => true }],
    ['verify', { verify: source }],
    ['statusClient, with a store that keeps expectations', { statusClient: source }],
  ])('with %s', async (_name, options) => {
    const { post, unprotected } = await started(options);
    await post(uniquePayload());
    expect(unprotected()).toEqual([]);
  });

  test('when ipn.expect() was called before the first request', async () => {
    const { post, unprotected } = await started({ store: new MemoryStore() }, (ipn) =>
      ipn.expect('EFB.000001', { amount: 5000 }),
    );
    await post(uniquePayload());
    expect(unprotected()).toEqual([]);
  });
});

describe("the operator's page", () => {
  async function overview(ipn: IpnRouter): Promise<string> {
    const admin = adminFetchHandler({ ipn, authorize: () => true, basePath: '/ops' });
    return (await admin(new Request('http://127.0.0.1/ops/'))).text();
  }

  test('says an unprotected router is unprotected, and an acknowledged one that it was acknowledged', async () => {
    const { logger } = recording();
    const bare = ipnRouter({ logger });
    expect(await overview(bare)).toContain('id="unprotected"');
    expect(await overview(bare)).toContain('anyone who learns its address can post a SUCCESSFUL');

    const acknowledged = ipnRouter({ logger, acknowledgeUnprotected: true });
    expect(await overview(acknowledged)).toContain('Unprotected, acknowledged');

    const guarded = ipnRouter({ logger, secret: 'a-long-enough-secret-for-the-ipn-url' });
    expect(await overview(guarded)).not.toContain('id="unprotected"');
    await Promise.all([bare.close(), acknowledged.close(), guarded.close()]);
  });
});
