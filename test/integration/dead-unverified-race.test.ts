import { createStatusClient, MemoryStore } from 'ipn-kit';
import { quiet } from '../helpers/quiet-logger.js';
import { settle } from '../helpers/servers.js';
import { eventually } from '../helpers/services.js';
import { until } from '../helpers/until.js';
import { latch, perTestService, quietRouter, timedOut } from '../helpers/verified-payments.js';

// Review of branch dead-forged: the genuine copy of a payment arrives while the forgery that holds its key is
// in its LAST attempt (the status query on its way). The copy finds the entry `failed` unverified and makes it
// due again (attempts 0, the live lease kept), then the attempt ends `later` and settles `dead` over it: the
// genuine copy was answered 200 as a duplicate and nothing makes the entry due again (no expectation, no
// sweep): the payment is never credited, the bug the branch fixes, in that window.

jest.setTimeout(20_000);

const t = perTestService();

test("a genuine copy arriving during the forgery's last attempt is not lost to that attempt's `dead`", async () => {
  const { transactionId: id } = t.provider.initiate({
    amount: 5000,
    ipnUrl: 'http://127.0.0.1:9/unused',
    customData: 'order-1',
    outcome: 'SUCCESSFUL',
    deliver: false,
  });
  t.provider.setState(id, 'PENDING');
  const client = createStatusClient({
    baseUrl: t.provider.statusBaseUrl,
    apiKey: 'k',
    minIntervalMs: 10,
    logger: quiet,
  });
  const { gate, open } = latch();
  const hold = { armed: false, reached: false };
  const verify = {
    getStatus: async (...args: Parameters<typeof client.getStatus>) => {
      if (!hold.armed) return client.getStatus(...args);
      hold.armed = false;
      hold.reached = true;
      await gate; // the last attempt's query, on its way while the genuine copy comes
      return timedOut();
    },
  };
  const store = new MemoryStore();
  const { ipn, recorder, url } = await t.serve(
    quietRouter({ store, delivery: 'at-least-once', verify, maxAttempts: 2, retryDelayMs: 200 }),
  );
  ipn.on('successful', () => {});
  ipn.on('error', () => {});
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
  const key = `${id}:SUCCESSFUL`;
  await eventually('the forgery retried', async () => (await ipn.inbox.get(key))?.status === 'failed');
  hold.armed = true;
  await until(() => hold.reached, 'the last attempt querying');

  t.provider.setState(id, 'SUCCESSFUL'); // the customer pays; the service notifies
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(200);
  open(); // the last attempt's query fails: `later`, settled over the copy's replay
  await eventually(
    'the attempt settled',
    async () => recorder.count('successful') > 0 || (await ipn.inbox.get(key))?.status === 'dead',
  );
  await ipn.drain({ budgetMs: 1_000 });
  await settle();
  await until(() => recorder.count('successful') > 0, 'the payment credited', 3_000);
  expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
});

test('a genuine copy that read the entry retried, then found it settled dead by the last attempt, still makes it due', async () => {
  const { transactionId: id } = t.provider.initiate({
    amount: 5000,
    ipnUrl: 'http://127.0.0.1:9/unused',
    customData: 'order-1',
    outcome: 'SUCCESSFUL',
    deliver: false,
  });
  t.provider.setState(id, 'PENDING');
  const client = createStatusClient({
    baseUrl: t.provider.statusBaseUrl,
    apiKey: 'k',
    minIntervalMs: 10,
    logger: quiet,
  });
  const query = latch();
  const write = latch();
  const hold = { armed: false, reached: false, replaying: false };
  const verify = {
    getStatus: async (...args: Parameters<typeof client.getStatus>) => {
      if (!hold.armed) return client.getStatus(...args);
      hold.armed = false;
      hold.reached = true;
      await query.gate;
      return timedOut();
    },
  };
  const store = new MemoryStore();
  const replay = store.replay.bind(store);
  store.replay = async (key, delayMs, from) => {
    if (from?.includes('failed') === true) {
      hold.replaying = true;
      await write.gate; // the copy's replay lands after the last attempt settled the entry dead
    }
    return replay(key, delayMs, from);
  };
  const { ipn, recorder, url } = await t.serve(
    quietRouter({ store, delivery: 'at-least-once', verify, maxAttempts: 2, retryDelayMs: 200 }),
  );
  ipn.on('successful', () => {});
  ipn.on('error', () => {});
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
  const key = `${id}:SUCCESSFUL`;
  await eventually('the forgery retried', async () => (await ipn.inbox.get(key))?.status === 'failed');
  hold.armed = true;
  await until(() => hold.reached, 'the last attempt querying');

  t.provider.setState(id, 'SUCCESSFUL');
  const posted = t.provider.forge({ ipnUrl: url, transactionId: id });
  await until(() => hold.replaying, "the copy's replay on its way");
  query.open();
  await until(() => recorder.count('dead') > 0, 'the last attempt settled dead');
  write.open();
  expect(await posted).toBe(200);
  await ipn.drain({ budgetMs: 1_000 });
  await settle();
  await until(() => recorder.count('successful') > 0, 'the payment credited', 3_000);
  expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
});
