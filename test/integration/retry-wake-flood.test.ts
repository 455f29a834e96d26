import { ipnRouter, MemoryStore } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';

jest.setTimeout(30_000);
const serve = servedRouters();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// A failed attempt's wake-up looks again until a pass takes its entry up (8 times over about 6 s). With the
// store's clock far behind, no look takes anything: each failed notification must not cost 9 lease queries
// of its own when many fail at once.
test('many failures whose retries are not yet due by the store clock: the looks share their lease queries', async () => {
  const store = new MemoryStore({ now: () => Date.now() - 60_000 });
  let leases = 0;
  const lease = store.lease.bind(store);
  store.lease = (...args: Parameters<typeof lease>) => {
    leases += 1;
    return lease(...args);
  };
  const ipn = ipnRouter({
    store,
    delivery: 'at-least-once',
    logger: quiet,
    retryDelayMs: 5,
    recoveryIntervalMs: 600_000,
  });
  ipn.on('error', () => {});
  ipn.on('successful', () => {
    throw new Error('ledger down');
  });
  const { post } = await serve(ipn);
  const failures = 60;
  for (let i = 0; i < failures; i += 1) {
    expect((await post(uniquePayload())).status).toBe(200);
    await sleep(3); // the failures come one after another, as a busy hour's do
  }
  await sleep(7_000); // every wake-up has looked its last
  // Each failure's wake-up is one pass (as before the looks again); its 8 looks again, shared with the
  // others', must not cost each failure 8 more.
  expect(leases).toBeLessThan(failures * 2);
});
