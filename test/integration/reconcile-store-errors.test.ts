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
import { KEPT_CONTRADICTED_LABEL, labelOf } from '../../lib/delivery/kept-unexpected.js';

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

test("a kept forgery whose replacement by the service's record fails: a StoreError, and labelled not to replay", async () => {
  const id = `RSF.${randomUUID().slice(0, 8)}`;
  const service: { known?: IpnNotification } = {};
  // The forgery's own status query is slow: the copy is still under its hold lease when the record comes.
  let answer: (record: IpnNotification) => void = () => {};
  const forgeryQuery = new Promise<IpnNotification>((resolve) => (answer = resolve));
  let queries = 0;
  const known = sourceOf(id, service);
  const source: StatusSource = {
    getStatus: (transactionId, options) =>
      transactionId === id && (queries += 1) === 1 ? forgeryQuery : known.getStatus(transactionId, options),
  };
  const store = new MemoryStore();
  const { ipn, events, post } = await serve(routerOf(store, { statusClient: source, unexpected: 'verify' }));
  ipn.on('error', () => {});
  await expectAnother(ipn);
  expect((await post({ ...toJson(recordOf(id, 1)) })).status).toBe(200);
  await until(() => queries === 1, "the forgery's status query");
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
  // Left kept, the forgery: the operator's page and the CLI say not to replay it (a replay delivers it).
  const kept = await ipn.inbox.get(`${id}:SUCCESSFUL`);
  expect(kept).toMatchObject({ status: 'failed', record: expect.objectContaining({ amount: 1 }) });
  expect(kept?.lastError).toMatch(/do not replay this copy/);
  expect(kept && labelOf(kept)).toBe(KEPT_CONTRADICTED_LABEL);
  // As they say, ipn.reconcile() puts the record in its place once the store writes again.
  store.replayWith = MemoryStore.prototype.replayWith.bind(store);
  expect(await ipn.reconcile(id)).toMatchObject({ emitted: true });
  await until(() => events.count('successful') > 0, 'the credit');
  expect(events.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
  answer(recordOf(id, 5000)); // the forgery's query answers at last: its hold was ended meanwhile
  await until(() => events.count('rejected') > 0, "the forgery's rejection");
});

function toJson(n: IpnNotification): Record<string, unknown> {
  return { transaction_id: n.transaction_id, state: n.state, amount: n.amount, custom_data: n.custom_data };
}
