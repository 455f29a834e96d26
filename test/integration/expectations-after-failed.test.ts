import { ipnRouter, MemoryStore } from '../../lib/index.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { settle } from '../helpers/servers.js';

/** A genuine FAILED must not open the door to a forged SUCCESSFUL of the same expected transaction. */
test('after a genuine FAILED, a forged SUCCESSFUL with another amount is still rejected by the expectation', async () => {
  const ipn = ipnRouter({ store: new MemoryStore(), logger: quiet });
  const recorder = recordEvents(ipn);
  const post = (body: object) =>
    ipn.fetch(
      new Request('https://shop.example/ipn', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }),
    );
  await ipn.expect('EXP.000009', { amount: 5000, customData: 'order-9' });

  const failed = await post({
    transaction_id: 'EXP.000009',
    state: 'FAILED',
    custom_data: 'order-9',
    amount: 5000,
  });
  await settle();
  const forged = { transaction_id: 'EXP.000009', state: 'SUCCESSFUL', custom_data: 'order-9', amount: 1 };
  const forgery = await post(forged);
  await settle();
  const genuine = { ...forged, amount: 5000 };
  const late = await post(genuine); // the service turned it SUCCESSFUL after all
  await settle();

  expect([failed.status, forgery.status, late.status]).toEqual([200, 200, 200]);
  expect(recorder.of('failed').map((n) => n.amount)).toEqual([5000]);
  expect(recorder.of('rejected').map((e) => e.notification.amount)).toEqual([1]);
  expect(recorder.of('successful').map((n) => n.amount)).toEqual([5000]);
  await ipn.close();
});
