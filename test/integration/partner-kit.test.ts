import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createStatusClient, ipnRouter } from 'ipn-kit';
import { createFakeProvider, type FakeProvider } from 'ipn-kit/testing';

let provider: FakeProvider;
let server: Server;
beforeAll(async () => {
  provider = await createFakeProvider({ apiKey: 'test-key', resendIntervalMs: 10 });
});
afterAll(async () => {
  server?.close();
  await provider.close();
});

test('a paid order is credited once, a forged one never', async () => {
  // Short waits for a test: a not-found is believed once the service repeats it minIntervalMs later.
  const client = createStatusClient({
    baseUrl: provider.statusBaseUrl,
    apiKey: 'test-key',
    minIntervalMs: 50,
  });
  const ipn = ipnRouter({ verify: client, verifyRetryDelayMs: 20 });
  const credited: string[] = [];
  const rejected: string[] = [];
  ipn.on('successful', (n) => void credited.push(n.custom_data));
  ipn.on('rejected', (event) => void rejected.push(event.notification.custom_data));
  server = createServer(ipn).listen(0, '127.0.0.1'); // or your Express app
  await new Promise((resolve) => server.once('listening', resolve));
  const ipnUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;

  const paid = provider.initiate({
    amount: 5000,
    ipnUrl,
    customData: 'order-1',
    outcome: 'SUCCESSFUL',
    duplicates: 2,
  });
  await paid.delivered; // answered 200, then resent twice (each copy until answered 200)
  await provider.forge({ ipnUrl, customData: 'order-2' }); // an id the service never processed
  while (credited.length + rejected.length < 2) await new Promise((resolve) => setTimeout(resolve, 10));

  expect(credited).toEqual(['order-1']);
  expect(rejected).toEqual(['order-2']);
  expect(provider.statusQueriesFor(paid.transactionId)).toBe(1);
});
