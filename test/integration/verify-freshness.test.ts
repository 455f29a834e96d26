import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createStatusClient, ipnRouter, VerificationError, type StatusClient } from '../../lib/index.js';
import type { StatusClientOptions } from '../../lib/status/status-client.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

/**
 * A status service on loopback whose answers the test changes as it goes: per id a record (sent as given,
 * so it may be partial) or nothing (not found). `asked` counts the requests per id.
 */
async function statusService() {
  const records = new Map<string, Record<string, unknown>>();
  const asked = new Map<string, number>();
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      const id = (JSON.parse(body) as { transaction_ids: string }).transaction_ids;
      asked.set(id, (asked.get(id) ?? 0) + 1);
      const record = records.get(id);
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify(
          record
            ? { data: record, message: '', statut_code: 200 }
            : { data: [id], message: 'transaction not found', statut_code: 404 },
        ),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api_v1/transaction`;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return { url, records, asked: (id: unknown) => asked.get(String(id)) ?? 0, close };
}

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(cleanup.splice(0).map((close) => close()));
});

async function start(clientOptions: Partial<StatusClientOptions> = {}, verifyAttempts = 6) {
  const service = await statusService();
  const client: StatusClient = createStatusClient({
    baseUrl: service.url,
    apiKey: 'key-of-the-partner',
    logger: quiet,
    retryDelayMs: 1,
    minIntervalMs: 100,
    ...clientOptions,
  });
  const ipn = ipnRouter({ verify: client, logger: quiet, verifyRetryDelayMs: 5, verifyAttempts });
  const recorder = recordEvents(ipn);
  const running: Running = await listen(ipn);
  cleanup.push(
    service.close,
    () => running.close(),
    () => ipn.close(),
  );
  const post = (body: unknown) =>
    fetch(`${running.url}/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  return { service, client, ipn, recorder, post };
}

describe('verify never condemns a notification on an answer older than it', () => {
  test('a genuine SUCCESSFUL after a FAILED is confirmed by a fresh query, and getStatus then sees SUCCESSFUL', async () => {
    const { service, client, ipn, recorder, post } = await start();
    const failed = uniquePayload({ state: 'FAILED' });
    const id = String(failed.transaction_id);
    service.records.set(id, failed);
    await post(failed);
    await until(() => recorder.count('failed') === 1, 'the failed event');
    expect((await client.getStatus(id)).state).toBe('FAILED'); // cached as final

    // A late operator confirmation: the service now says SUCCESSFUL, and notifies it.
    const successful = { ...failed, state: 'SUCCESSFUL' };
    service.records.set(id, successful);
    await post(successful);
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.count('rejected')).toBe(0);
    expect(service.asked(id)).toBe(2);
    expect((await client.getStatus(id)).state).toBe('SUCCESSFUL');
    expect((await ipn.reconcile(id)).record.state).toBe('SUCCESSFUL');
  });

  test('a not-found cached from a forged post before the transaction existed never rejects the genuine notification', async () => {
    const { service, recorder, post } = await start();
    const genuine = uniquePayload();
    const id = String(genuine.transaction_id);
    // A forger guesses the next id and posts a FAILED for it before the service knows it.
    await post({ ...genuine, state: 'FAILED' });
    await until(() => service.asked(id) === 1, 'the not-found answer');

    service.records.set(id, genuine);
    await post(genuine);
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.of('successful')[0]).toMatchObject({ transaction_id: id, amount: genuine.amount });
    // The forged FAILED is rejected on the service's fresh record, never as not_found.
    await until(() => recorder.count('rejected') === 1, 'the rejected event');
    expect(recorder.of('rejected')[0]).toMatchObject({ reason: 'mismatch', mismatches: ['state'] });
  });

  test('a first not-found (replicas lagging) is asked once more after a delay, and the payment delivered', async () => {
    const { service, recorder, post } = await start();
    const genuine = uniquePayload();
    const id = String(genuine.transaction_id);
    await post(genuine);
    await until(() => service.asked(id) === 1, 'the first answer');
    service.records.set(id, genuine);
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(service.asked(id)).toBe(2);
    expect(recorder.count('rejected')).toBe(0);
  });

  test('an id the service never knows is rejected as not_found after the second answer, naming the likely misconfiguration', async () => {
    const { service, recorder, post } = await start();
    const forged = uniquePayload();
    await post(forged);
    await until(() => recorder.count('rejected') === 1, 'the rejected event');
    expect(service.asked(forged.transaction_id)).toBe(2);
    const [event] = recorder.of('rejected');
    expect(event).toMatchObject({ reason: 'not_found' });
    expect(event.message).toContain('apiKey or baseUrl');
  });
});

describe('verify with a service that answers partial records', () => {
  test.each<[string, (record: Record<string, unknown>) => Record<string, unknown>]>([
    ['without amount', ({ amount, ...rest }) => rest],
    ['without custom_data', ({ custom_data, ...rest }) => rest],
    ['with neither', ({ amount, custom_data, ...rest }) => rest],
  ])('%s: no successful, no rejection; retried, then reported with the notification', async (_, partial) => {
    const { service, recorder, post } = await start({ minIntervalMs: 1 }, 3);
    const genuine = uniquePayload();
    const id = String(genuine.transaction_id);
    service.records.set(id, partial(genuine));
    // The genuine copy, and a forged copy of another transaction with another amount.
    const other = uniquePayload();
    service.records.set(String(other.transaction_id), partial(other));
    await post(genuine);
    await post({ ...other, amount: 1 });

    await until(() => recorder.count('error') === 2, 'both error events');
    for (const event of recorder.of('error')) expect(event.error).toBeInstanceOf(VerificationError);
    expect(
      recorder
        .of('error')
        .map((event) => event.notification.transaction_id)
        .sort(),
    ).toEqual([id, String(other.transaction_id)].sort());
    expect(String(recorder.of('error')[0].error.message)).toContain('lacks');
    expect(recorder.count('successful') + recorder.count('notification') + recorder.count('rejected')).toBe(
      0,
    );
    // A partial final answer is not cached for good: each attempt asked again.
    expect(service.asked(id)).toBe(3);

    // Not lost: once the service answers whole records, the resend is delivered.
    service.records.set(id, genuine);
    await post(genuine);
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.of('successful')[0].amount).toBe(genuine.amount);
  });
});
