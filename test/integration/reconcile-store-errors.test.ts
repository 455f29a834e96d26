import { randomUUID } from 'node:crypto';
import {
  ipnNotificationSchema,
  ipnRouter,
  MemoryStore,
  StoreError,
  TransactionNotFoundError,
  type IpnNotification,
  type Options,
  type StatusSource,
} from 'ipn-kit';
import { expectAnother, keptServer } from '../helpers/kept-unexpected.js';
import { quiet } from '../helpers/quiet-logger.js';
import { until } from '../helpers/until.js';
import { NO_SWEEP } from '../helpers/verified-payments.js';

// ipn.reconcile() documents its rejections as StatusError, StoreError or IpnKitError: a store's plain Error on
// the path of a key already in the inbox (its entry read, a kept copy's hold ended or replaced) is a
// StoreError, the store's error its cause.

jest.setTimeout(20_000);

const serve = keptServer();

const recordOf = (id: string, amount: number): IpnNotification =>
  ipnNotificationSchema.parse({ transaction_id: id, state: 'SUCCESSFUL', amount, custom_data: 'order-r' });

/** A status source that knows `service.known` only (else not found). */
function sourceOf(id: string, service: { known?: IpnNotification }): StatusSource {
  return {
    getStatus: (transactionId) =>
      transactionId === id && service.known !== undefined
        ? Promise.resolve(service.known)
        : Promise.reject(new TransactionNotFoundError(transactionId)),
  };
}

const routerOf = (store: MemoryStore, options: Partial<Options>) =>
  ipnRouter({
    store,
    delivery: 'at-least-once',
    logger: quiet,
    sweepIntervalMs: NO_SWEEP,
    reconcileAfterMs: 10,
    recoveryIntervalMs: 50,
    ...options,
  });

const down = new Error('the store is down');

for (const how of ['verify', 'statusClient'] as const) {
  test(`with ${how}: a delivered key whose entry read fails rejects with a StoreError`, async () => {
    const id = `RSE.${randomUUID().slice(0, 8)}`;
    const service = { known: recordOf(id, 5000) };
    const store = new MemoryStore();
    const { ipn, events, post } = await serve(routerOf(store, { [how]: sourceOf(id, service) }));
    ipn.on('error', () => {});
    expect((await post(toJson(service.known))).status).toBe(200);
    await until(() => events.count('successful') > 0, 'delivered');
    store.get = () => Promise.reject(down);
    const failure = await ipn.reconcile(id).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(StoreError);
    expect(failure).toMatchObject({ cause: down });
  });
}

test("a kept forgery whose replacement by the service's record fails rejects with a StoreError", async () => {
  const id = `RSF.${randomUUID().slice(0, 8)}`;
  const service: { known?: IpnNotification } = {};
  const store = new MemoryStore();
  const { ipn, events, post } = await serve(
    routerOf(store, { statusClient: sourceOf(id, service), unexpected: 'verify' }),
  );
  ipn.on('error', () => {});
  await expectAnother(ipn);
  expect((await post({ ...toJson(recordOf(id, 1)) })).status).toBe(200);
  await until(() => events.count('rejected') > 0, 'the forgery kept');
  service.known = recordOf(id, 5000);
  await ipn.expect(id, { amount: 5000, customData: 'order-r' });
  store.replayWith = () => Promise.reject(down);
  const failure = await ipn.reconcile(id).then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(failure).toBeInstanceOf(StoreError);
  expect(failure).toMatchObject({ cause: down });
  expect(events.count('successful')).toBe(0);
});

function toJson(n: IpnNotification): Record<string, unknown> {
  return { transaction_id: n.transaction_id, state: n.state, amount: n.amount, custom_data: n.custom_data };
}
