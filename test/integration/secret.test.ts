import { ipnRouter, ipnUrl } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { EXPRESS_VERSIONS, listen, settle, type Running } from '../helpers/servers.js';

const SECRET = 'k3y-0f-at-least-16-chars';
const NEXT_SECRET = 'the-next-secret-after-rotation';

describe.each(EXPRESS_VERSIONS)('ipnRouter({ secret }) under %s', (_version, express) => {
  const servers: Running[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
  });

  async function start(secret: string | string[], mount: 'use' | 'post' = 'use') {
    const ipn = ipnRouter({ secret, logger: quiet });
    const app = express();
    if (mount === 'use') app.use('/ipn', ipn);
    else app.post('/ipn', ipn);
    const running = await listen(app);
    servers.push(running);
    const post = (address: string, body: unknown = uniquePayload()) =>
      fetch(address, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    return { recorder: recordEvents(ipn), post, base: `${running.url}/ipn` };
  }

  test.each(['use', 'post'] as const)('the address ipnUrl() builds is accepted (app.%s)', async (mount) => {
    const { recorder, post, base } = await start(SECRET, mount);
    const response = await post(ipnUrl(base, { secret: SECRET }));
    expect(response.status).toBe(200);
    await settle();
    expect(recorder.count('successful')).toBe(1);
  });

  test.each([
    ['missing', (base: string) => base, 'missing'],
    ['wrong', (base: string) => ipnUrl(base, { secret: 'not-the-secret-at-all' }), 'wrong'],
    ['truncated', (base: string) => ipnUrl(base, { secret: SECRET.slice(0, -1) }), 'wrong'],
  ])('a %s token is answered 401 with a JSON error, and emits invalid', async (_case, address, word) => {
    const { recorder, post, base } = await start(SECRET);
    const response = await post(address(base));
    expect(response.status).toBe(401);
    const body = (await response.json()) as { error: string; message: string };
    expect(body.error).toBe('unauthorized');
    expect(body.message).toContain(word);
    expect(body.message).not.toContain(SECRET);
    await settle();
    expect(recorder.names()).toEqual(['invalid']);
    expect(recorder.of('invalid')[0]).toMatchObject({ reason: 'unauthorized', status: 401 });
  });

  test('during a rotation, both secrets are accepted', async () => {
    const { recorder, post, base } = await start([SECRET, NEXT_SECRET]);
    expect((await post(ipnUrl(base, { secret: SECRET }))).status).toBe(200);
    expect((await post(ipnUrl(base, { secret: NEXT_SECRET }))).status).toBe(200);
    expect((await post(ipnUrl(base, { secret: 'an-old-secret-now-retired' }))).status).toBe(401);
    await settle();
    expect(recorder.count('successful')).toBe(2);
  });
});

test('a secret shorter than 16 characters is a TypeError at construction', () => {
  expect(() => ipnRouter({ secret: 'short' })).toThrow(/at least 16 characters/);
  expect(() => ipnRouter({ secret: [] })).toThrow(TypeError);
});

describe('a secret that no request has matched since start', () => {
  async function start() {
    const warnings: Array<[Record<string, unknown>, string]> = [];
    const logger = {
      ...quiet,
      warn: (object: Record<string, unknown>, message: string) => void warnings.push([object, message]),
    };
    const ipn = ipnRouter({ secret: SECRET, logger });
    const running = await listen(ipn);
    const post = (address: string) =>
      fetch(address, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(uniquePayload()),
      });
    const likelyCause = () => warnings.filter(([, message]) => message.includes('the `secret` option'));
    return { running, post, base: `${running.url}/`, warnings, likelyCause };
  }

  test('three refused notifications log ONE warning naming the secret and the address token', async () => {
    const { running, post, base, warnings, likelyCause } = await start();
    try {
      expect((await post(ipnUrl(base, { secret: 'a-secret-the-service-was-given' }))).status).toBe(401);
      expect((await post(base)).status).toBe(401);
      expect((await post(ipnUrl(base, { secret: 'a-secret-the-service-was-given' }))).status).toBe(401);
      await settle();

      expect(warnings.filter(([, message]) => message.startsWith('rejected an IPN request'))).toHaveLength(3);
      expect(likelyCause()).toHaveLength(1);
      const [[fields, message]] = likelyCause() as [[Record<string, unknown>, string]];
      expect(message).toContain('no request to the IPN address has carried the right token since start');
      expect(message).toContain('?token=');
      expect(message).toContain('ipnUrl(yourUrl, secret)');
      expect(message).not.toContain(SECRET);
      expect(fields).toEqual({ unauthorized: 1, withoutToken: 0, withOtherToken: 1 });
    } finally {
      await running.close();
    }
  });

  test('once a token has matched, later 401s are forgeries: no such warning', async () => {
    const { running, post, base, likelyCause } = await start();
    try {
      expect((await post(ipnUrl(base, { secret: SECRET }))).status).toBe(200);
      expect((await post(base)).status).toBe(401);
      await settle();

      expect(likelyCause()).toEqual([]);
    } finally {
      await running.close();
    }
  });
});
