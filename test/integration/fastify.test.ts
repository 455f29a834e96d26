import Fastify, { type FastifyInstance } from 'fastify';
import Fastify4 from 'fastify4';
import { ipnRouter, type IpnRouter } from '../../lib/index.js';
import { ipnPlugin } from '../../lib/fastify.js';
import { createFastifyApp } from '../../examples/frameworks/fastify.js';
import { describeFramework, type Mounted } from '../helpers/framework-scenario.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { until } from '../helpers/until.js';

async function serve(app: FastifyInstance): Promise<Mounted> {
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  return { ipnUrl: `${address}/ipn`, close: () => app.close() };
}

/** A host app whose own parsers would break the route: JSON parsed strictly, everything else refused. */
async function hostileHost(ipn: IpnRouter): Promise<FastifyInstance> {
  const app = Fastify();
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: 10 }, (_req, body, done) =>
    done(null, JSON.parse(String(body))),
  );
  app.addContentTypeParser('*', (_req, _payload, done) => done(new Error('the host refuses this body')));
  app.post('/orders', (request, reply) => reply.send({ received: request.body }));
  await app.register(ipnPlugin, { prefix: '/ipn', router: ipn });
  return app;
}

describeFramework('Fastify 5, the documented snippet', async (ipn) => serve(await createFastifyApp(ipn)));

describeFramework('Fastify 5, behind host content-type parsers that would refuse the body', async (ipn) =>
  serve(await hostileHost(ipn)),
);

describeFramework('Fastify 4', async (ipn) => {
  const app = Fastify4();
  await app.register(ipnPlugin as never, { prefix: '/ipn', router: ipn });
  return serve(app as unknown as FastifyInstance);
});

describe('ipn-kit/fastify beside the host app', () => {
  test("the host's own parsers still serve its other routes, and the plugin route a large JSON body", async () => {
    const ipn = ipnRouter({ logger: quiet });
    const recorder = recordEvents(ipn);
    const app = await hostileHost(ipn);
    const { ipnUrl, close } = await serve(app);
    const origin = new URL(ipnUrl).origin;

    const orders = await fetch(`${origin}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"a":1}',
    });
    // Over the host parser's 10-byte bodyLimit: the plugin's route reads with the router's limit.
    const notified = await fetch(`${ipnUrl}?source=service`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(uniquePayload()),
    });
    await close();
    await ipn.close();

    expect(orders.status).toBe(200);
    expect(await orders.json()).toEqual({ received: { a: 1 } });
    expect(notified.status).toBe(200);
    expect(recorder.names()).toEqual(['notification', 'successful']);
  });

  test('a router that is not one ipnRouter() made is refused when the plugin registers', async () => {
    const app = Fastify();
    await expect(
      app.register(ipnPlugin, { prefix: '/ipn', router: (() => {}) as unknown as IpnRouter }),
    ).rejects.toThrow(TypeError);
  });
});

describe('an answer the host app makes impossible to write', () => {
  for (const [version, create] of [
    ['Fastify 5', () => Fastify()],
    ['Fastify 4', () => Fastify4() as unknown as FastifyInstance],
  ] as const) {
    test(`${version}: a writeHead that throws ends the exchange instead of hanging it, and still delivers once`, async () => {
      const ipn = ipnRouter({ logger: quiet });
      const recorder = recordEvents(ipn);
      const app = create();
      // A host hook on the raw response's headers (on-headers through @fastify/express, say) that throws.
      app.addHook('onRequest', async (_request, reply) => {
        reply.raw.writeHead = () => {
          throw new TypeError('a header hook of the host threw');
        };
      });
      await app.register(ipnPlugin as never, { prefix: '/ipn', router: ipn });
      const { ipnUrl, close } = await serve(app);

      const outcome = await fetch(ipnUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(uniquePayload()),
        signal: AbortSignal.timeout(3_000),
      }).then(
        (response) => `answered ${response.status}`,
        (error: Error) => (error.name === 'TimeoutError' ? 'hung' : 'connection closed'),
      );

      expect(outcome).toBe('connection closed');
      await until(() => recorder.count('successful') === 1, 'the delivery');
      expect(recorder.names()).toEqual(['error', 'notification', 'successful']);
      await close();
      await ipn.close();
    });
  }
});

describe('the answer goes before the listeners', () => {
  for (const [version, create] of [
    ['Fastify 5', () => Fastify()],
    ['Fastify 4', () => Fastify4() as unknown as FastifyInstance],
  ] as const) {
    test(`${version}: behind a host's async onSend hook, the 200 is written before a listener runs`, async () => {
      const ipn = ipnRouter({ logger: quiet });
      const app = create();
      const responses: Array<{ writableEnded: boolean }> = [];
      app.addHook('onRequest', async (_request, reply) => void responses.push(reply.raw));
      // Any plugin with an onSend hook (cookies, sessions, compression) makes Fastify write the answer later.
      app.addHook('onSend', async (_request, _reply, payload) => payload);
      await app.register(ipnPlugin as never, { prefix: '/ipn', router: ipn });
      const written: boolean[] = [];
      ipn.on('successful', () => void written.push(responses[0]?.writableEnded === true));
      const { ipnUrl, close } = await serve(app);

      const response = await fetch(ipnUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(uniquePayload()),
      });

      expect(response.status).toBe(200);
      await until(() => written.length === 1, 'the listener');
      // A synchronous listener (a ledger write with better-sqlite3, say) must not hold the service's 200.
      expect(written).toEqual([true]);
      await close();
      await ipn.close();
    });
  }
});
