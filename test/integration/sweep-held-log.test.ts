import { randomUUID } from 'node:crypto';
import {
  ipnNotificationSchema,
  ipnRouter,
  MemoryStore,
  TransactionNotFoundError,
  type IpnNotification,
  type Options,
  type StatusSource,
} from 'ipn-kit';
import { recordingLogger } from '../helpers/delivery-context.js';
import { expectAnother, keptServer } from '../helpers/kept-unexpected.js';
import { until } from '../helpers/until.js';
import { NO_SWEEP } from '../helpers/verified-payments.js';

// The sweep's log of an expected transaction it reconciled says whether its notification never arrived, or
// arrived and was held under its key (a kept forgery replaced by the record, a dead unverified copy made due).

jest.setTimeout(20_000);

const serve = keptServer();

const NEVER_ARRIVED = /its notification never arrived/;
const HAD_ARRIVED = /its notification had arrived and was held under its key/;

const recordOf = (id: string, state: string, amount: number): IpnNotification =>
  ipnNotificationSchema.parse({ transaction_id: id, state, amount, custom_data: 'order-s' });

const bodyOf = (n: IpnNotification) => ({
  transaction_id: n.transaction_id,
  state: n.state,
  amount: n.amount,
  custom_data: n.custom_data,
});

/** A status source that knows `service.known` only (else not found). */
const sourceOf = (id: string, service: { known?: IpnNotification }): StatusSource => ({
  getStatus: (transactionId) =>
    transactionId === id && service.known !== undefined
      ? Promise.resolve(service.known)
      : Promise.reject(new TransactionNotFoundError(transactionId)),
});

function routerOf(options: Partial<Options>) {
  const { logger, lines } = recordingLogger();
  const ipn = ipnRouter({
    store: new MemoryStore(),
    delivery: 'at-least-once',
    logger,
    sweepIntervalMs: NO_SWEEP,
    reconcileAfterMs: 10,
    recoveryIntervalMs: 50,
    ...options,
  });
  return { ipn, lines };
}

/** Sweeps once the expectation is due (reconcileAfterMs after `expectedAt`): one transaction reconciled. */
async function sweepOnceDue(ipn: ReturnType<typeof ipnRouter>, expectedAt: number): Promise<void> {
  await until(() => Date.now() > expectedAt + 20, 'the expectation due (reconcileAfterMs)');
  expect(await ipn.sweep()).toMatchObject({ reconciled: 1, stale: 0 });
}

test("a kept forgery the sweep replaces by the service's record: logged as arrived and held", async () => {
  const id = `SHK.${randomUUID().slice(0, 8)}`;
  const service: { known?: IpnNotification } = {};
  const { ipn, lines } = routerOf({ statusClient: sourceOf(id, service), unexpected: 'verify' });
  const { events, post } = await serve(ipn);
  await expectAnother(ipn);
  expect((await post(bodyOf(recordOf(id, 'SUCCESSFUL', 1)))).status).toBe(200);
  await until(() => events.count('rejected') > 0, 'the forgery kept');
  service.known = recordOf(id, 'SUCCESSFUL', 5000);
  const expectedAt = Date.now();
  await ipn.expect(id, { amount: 5000, customData: 'order-s' });
  await sweepOnceDue(ipn, expectedAt);
  await until(() => events.count('successful') > 0, 'the credit');
  expect(events.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
  const said = lines.map((line) => line.message);
  expect(said.filter((m) => NEVER_ARRIVED.test(m))).toEqual([]);
  expect(said.filter((m) => HAD_ARRIVED.test(m))).toHaveLength(1);
});

test('a dead unverified copy the sweep makes due again: logged as arrived and held', async () => {
  const id = `SHD.${randomUUID().slice(0, 8)}`;
  const service = { known: recordOf(id, 'PENDING', 5000) };
  const { ipn, lines } = routerOf({ verify: sourceOf(id, service), maxAttempts: 1 });
  const { events, post } = await serve(ipn);
  ipn.on('dead', () => {});
  await ipn.expect(id, { amount: 5000, customData: 'order-s' });
  // A copy posted while the transaction is still pending: verification cannot decide it, dead unverified.
  expect((await post(bodyOf(recordOf(id, 'SUCCESSFUL', 5000)))).status).toBe(200);
  await until(() => events.count('dead') > 0, 'dead unverified');
  service.known = recordOf(id, 'SUCCESSFUL', 5000);
  await sweepOnceDue(ipn, Date.now());
  await until(() => events.count('successful') > 0, 'the credit');
  const said = lines.map((line) => line.message);
  expect(said.filter((m) => NEVER_ARRIVED.test(m))).toEqual([]);
  expect(said.filter((m) => HAD_ARRIVED.test(m))).toHaveLength(1);
});

test('an expected transaction with nothing in the inbox: logged as never arrived', async () => {
  const id = `SHN.${randomUUID().slice(0, 8)}`;
  const service = { known: recordOf(id, 'SUCCESSFUL', 5000) };
  const { ipn, lines } = routerOf({ statusClient: sourceOf(id, service) });
  const { events } = await serve(ipn);
  const expectedAt = Date.now();
  await ipn.expect(id, { amount: 5000, customData: 'order-s' });
  await sweepOnceDue(ipn, expectedAt);
  await until(() => events.count('successful') > 0, 'the credit');
  const said = lines.map((line) => line.message);
  expect(said.filter((m) => NEVER_ARRIVED.test(m))).toHaveLength(1);
  expect(said.filter((m) => HAD_ARRIVED.test(m))).toEqual([]);
});
