import { MemoryStore, type StatusClient } from 'ipn-kit';
import { settle } from '../helpers/servers.js';
import { until } from '../helpers/until.js';
import {
  latch,
  forgedPayments,
  perTestService,
  quietRouter,
  untilFirst,
} from '../helpers/verified-payments.js';

// At most once with `verify`: a copy that arrives while another copy of its key is being verified on this
// instance is not answered as a plain duplicate (200: the service would stop resending it), since that other
// copy may yet be given up on (a forgery the service still reports PENDING); it is answered 503
// `verification_pending`, and the service's resend is decided once the first copy is. And no copy is given up
// on (`not_final`) on a PENDING the status client cached before that copy arrived. From the attack review
// (branch attack-preempt, "at most once, with verify").

jest.setTimeout(20_000);

const t = perTestService();
const { clientOf, pending, genuine } = forgedPayments(t);

/** How long the status client reuses a non-final answer here: the test's 15 minutes (minIntervalMs). */
const INTERVAL_MS = 3_000;

/**
 * A `verify` over `client` whose answers (already taken, and cached by the client) are handed on only once
 * `open()` is called: the copy being verified stays so, whatever the machine's load.
 */
function heldAfterAnswer(client: StatusClient) {
  const { gate, open } = latch();
  const verify = {
    getStatus: async (...args: Parameters<StatusClient['getStatus']>) => {
      const record = await client.getStatus(...args);
      await gate;
      return record;
    },
  };
  return { verify, open };
}

test('the genuine SUCCESSFUL arriving while a forgery of its pending transaction is verified is answered 503, then credited once the forgery is given up', async () => {
  const id = pending();
  const { verify, open } = heldAfterAnswer(clientOf(INTERVAL_MS));
  const { recorder, url } = await t.serve(
    quietRouter({ store: new MemoryStore(), verify, verifyAttempts: 3, verifyRetryDelayMs: 20 }),
  );
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
  await until(() => t.provider.statusQueriesFor(id) > 0, "the forgery's first status query (PENDING)");

  t.provider.setState(id, 'SUCCESSFUL'); // the customer pays; the service notifies
  // The forgery holds the key and may be given up on: not a duplicate (on main: 200, and the payment lost).
  expect(await genuine(url, id)).toBe(503);
  expect(recorder.count('duplicate')).toBe(0);
  open();
  // Its retries get the cached PENDING (asked before it arrived, so it may condemn it): given up, released.
  await untilFirst(recorder, 'rejected', 'the forgery given up on');
  expect(recorder.of('rejected')).toEqual([expect.objectContaining({ reason: 'not_final' })]);

  // The service's resend: claimed. The PENDING cached before it arrived does not give it up; it is asked
  // again once the client allows (after its interval), and confirmed.
  expect(await genuine(url, id)).toBe(200);
  await untilFirst(recorder, 'successful', 'the payment credited', INTERVAL_MS + 4_000);
  expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
  expect(recorder.count('rejected')).toBe(1);
  expect(recorder.count('error')).toBe(0);
  expect(t.provider.statusQueriesFor(id)).toBe(2); // the forgery's one, and the one after the interval
});

test('a genuine resend while the genuine copy is being verified is answered 503, then a duplicate: credited once', async () => {
  const id = pending('order-2', 700);
  t.provider.setState(id, 'SUCCESSFUL'); // paid
  const { verify, open } = heldAfterAnswer(clientOf(INTERVAL_MS));
  const { ipn, recorder, url } = await t.serve(quietRouter({ store: new MemoryStore(), verify }));
  ipn.on('successful', () => {});
  expect(await genuine(url, id)).toBe(200);
  await until(() => t.provider.statusQueriesFor(id) > 0, 'the first copy verified');
  expect(await genuine(url, id)).toBe(503); // the service resends it later
  open();
  await untilFirst(recorder, 'successful', 'the credit');
  expect(await genuine(url, id)).toBe(200); // the resend, once the first copy is credited
  await settle();
  expect(recorder.of('successful')).toEqual([
    expect.objectContaining({ transaction_id: id, amount: 700, custom_data: 'order-2' }),
  ]);
  expect(recorder.count('duplicate')).toBe(1);
  expect(recorder.count('rejected') + recorder.count('error')).toBe(0);
  expect(t.provider.statusQueriesFor(id)).toBe(1);
});
