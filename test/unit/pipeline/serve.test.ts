import { Readable } from 'node:stream';
import { createIpnCore } from '../../../lib/pipeline/ipn-core.js';
import type { IpnRequest } from '../../../lib/pipeline/ipn-outcome.js';
import { serve, type Reply, type Transport } from '../../../lib/pipeline/serve.js';
import { uniquePayload } from '../../helpers/payloads.js';
import { quiet } from '../../helpers/quiet-logger.js';
import { settle } from '../../helpers/servers.js';
import { until } from '../../helpers/until.js';

/** A core, the events it emits in order, and a transport over plain values whose parts a test replaces. */
function setup() {
  const core = createIpnCore({ logger: quiet }, () => undefined);
  const events: Array<{ name: string; payload: unknown }> = [];
  for (const name of ['notification', 'successful', 'invalid', 'error'] as const) {
    core.methods.on(name, (payload: unknown) => void events.push({ name, payload }));
  }
  const written: Reply[] = [];
  const handed: Array<Promise<void>> = [];
  const transport: Transport<[IpnRequest], string> = {
    toIpnRequest: (request) => request,
    write: (reply) => {
      written.push(reply);
      return 'written';
    },
    unwritten: () => 'unwritten',
    waitUntil: (work) => void handed.push(work),
  };
  return { core, events, names: () => events.map((event) => event.name), written, handed, transport };
}

const post = (body: unknown): IpnRequest => ({
  method: 'POST',
  contentType: 'application/json',
  body: { stream: Readable.from([Buffer.from(JSON.stringify(body))]) },
});

describe('serve(core, transport): the one request flow of every adapter', () => {
  test('writes the JSON text with Content-Type and Content-Length, and hands waitUntil the delivery', async () => {
    const { core, names, written, handed, transport } = setup();

    const out = await serve(core, transport)(post(uniquePayload()));

    expect(out).toBe('written');
    expect(written).toEqual([
      {
        status: 200,
        headers: { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': '11' },
        body: '{"ok":true}',
      },
    ]);
    expect(handed).toHaveLength(1);
    await handed[0];
    expect(names()).toEqual(['notification', 'successful']);
    await core.close();
  });

  test("HEAD has no body, and the Content-Length of GET's", async () => {
    const { core, written, transport } = setup();
    await serve(core, transport)({ method: 'HEAD', body: { consumed: true } });
    expect(written[0]).toEqual({
      status: 200,
      headers: { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': '11' },
      body: undefined,
    });
    await core.close();
  });

  test("an outcome's headers are kept beside the content headers", async () => {
    const { core, written, transport } = setup();
    await serve(core, transport)({ method: 'PATCH', body: { consumed: true } });
    expect(written[0]?.status).toBe(405);
    expect(written[0]?.headers).toMatchObject({ Allow: 'GET, HEAD, POST' });
    expect(written[0]?.headers['Content-Length']).toBe(String(Buffer.byteLength(written[0]?.body ?? '')));
    await core.close();
  });

  test('a throw while turning the request into an IpnRequest is a 500, reported as error', async () => {
    const { core, names, written, handed, transport } = setup();
    const throwing: Transport<[IpnRequest], string> = {
      ...transport,
      toIpnRequest: () => {
        throw new Error('a getter of the host threw');
      },
    };

    const out = await serve(core, throwing)(post(uniquePayload()));

    expect(out).toBe('written');
    expect(written[0]?.status).toBe(500);
    expect(JSON.parse(written[0]?.body ?? '')).toMatchObject({ error: 'internal_error' });
    await handed[0];
    expect(names()).toEqual(['error']);
    await core.close();
  });

  test('a write that throws is reported, and the claimed notification is still delivered', async () => {
    const { core, events, names, handed, transport } = setup();
    const failing: Transport<[IpnRequest], string> = {
      ...transport,
      write: () => {
        throw new Error('the socket is gone');
      },
    };

    const out = await serve(core, failing)(post(uniquePayload()));

    expect(out).toBe('unwritten');
    await handed[0];
    expect(names()).toEqual(['error', 'notification', 'successful']);
    expect(events[0]?.payload).toMatchObject({ error: { code: 'IPN_INTERNAL' } });
    await core.close();
  });

  test('a waitUntil that throws is reported, and the answer is still given', async () => {
    const { core, names, transport } = setup();
    const failing: Transport<[IpnRequest], string> = {
      ...transport,
      waitUntil: () => {
        throw new Error('waitUntil outside a request');
      },
    };

    const out = await serve(core, failing)(post(uniquePayload()));

    expect(out).toBe('written');
    expect(names()).toContain('error');
    await core.close();
  });

  test('without waitUntil, the work after the answer runs exactly once all the same', async () => {
    const { core, names, transport } = setup();
    const { waitUntil: _unused, ...plain } = transport;
    const handler = serve(core, plain);

    await handler(post(uniquePayload()));

    await until(() => names().length >= 2, 'the delivery');
    await settle();
    expect(names()).toEqual(['notification', 'successful']);
    await core.close();
  });
});
