import { ipnRouter, MemoryStore, type IpnRouter } from '../../lib/index.js';
import { createWorker, drainEndpoint, drainJob } from '../../examples/frameworks/serverless-cron.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { until } from '../helpers/until.js';

// The scheduled-drain recipes of docs/frameworks.md, called as their platform calls them (the platform's
// own wrapper, Deno.serve or onSchedule, is not run here: its package is not installed).

const routers: IpnRouter[] = [];
afterAll(async () => {
  await Promise.all(routers.map((ipn) => ipn.close()));
});

/** A router whose timers are an hour away, over a store holding an entry a crashed process left. */
async function routerWithCrashedEntry() {
  let now = Date.now();
  const store = new MemoryStore({ now: () => now });
  const payment = uniquePayload();
  const key = `${String(payment.transaction_id)}:SUCCESSFUL`;
  await store.receive(key, payment, { id: 'crashed', ms: 1_000 });
  const lease = jest.spyOn(store, 'lease');
  const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, recoveryIntervalMs: 3_600_000 });
  routers.push(ipn);
  // The recovery at start finds the entry still leased; then the lease runs out: only a drain takes it up.
  await until(() => lease.mock.calls.length === 1, 'the recovery at start');
  now += 2_000;
  const credited: string[] = [];
  ipn.on('successful', (n) => void credited.push(n.transaction_id));
  return { ipn, store, key, credited, payment };
}

const ZERO = { delivered: 0, retried: 0, dead: 0, swept: 0, left: 0 };

test('Vercel Cron: the route answers the counts to the cron secret, 401 to anyone else', async () => {
  process.env.CRON_SECRET = 'cron-secret-for-the-test';
  process.env.PAYMENT_API_KEY ??= 'k'.repeat(24);
  const { GET, maxDuration } = await import('../../examples/nextjs/app/api/ipn-drain/route.js');
  expect(maxDuration).toBeGreaterThan(30);
  const refused = await GET(new Request('http://app.example/api/ipn-drain'));
  expect(refused.status).toBe(401);
  const wrong = await GET(
    new Request('http://app.example/api/ipn-drain', { headers: { authorization: 'Bearer guess' } }),
  );
  expect(wrong.status).toBe(401);
  const answer = await GET(
    new Request('http://app.example/api/ipn-drain', {
      headers: { authorization: 'Bearer cron-secret-for-the-test' },
    }),
  );
  expect(answer.status).toBe(200);
  expect(await answer.json()).toEqual(ZERO);
});

test('Workers: scheduled() hands the drain to waitUntil, which delivers what a crashed attempt left', async () => {
  const { ipn, store, key, credited, payment } = await routerWithCrashedEntry();
  const worker = createWorker(ipn);
  const log = jest.spyOn(console, 'log').mockImplementation(() => {});
  const handed: Array<Promise<unknown>> = [];
  worker.scheduled({}, {}, { waitUntil: (promise) => void handed.push(promise) });
  expect(handed).toHaveLength(1);
  await Promise.all(handed);
  expect(credited).toEqual([payment.transaction_id]);
  expect((await store.get(key))?.status).toBe('delivered');
  expect(log).toHaveBeenCalledWith('ipn drain', { ...ZERO, delivered: 1 });
  log.mockRestore();
});

test('Supabase: the endpoint drains for the secret only, and answers the counts', async () => {
  const { ipn, credited } = await routerWithCrashedEntry();
  const endpoint = drainEndpoint(ipn, 'supabase-secret');
  expect((await endpoint(new Request('http://x.example/ipn-drain', { method: 'POST' }))).status).toBe(401);
  expect(credited).toEqual([]);
  const answer = await endpoint(
    new Request('http://x.example/ipn-drain', {
      method: 'POST',
      headers: { authorization: 'Bearer supabase-secret' },
    }),
  );
  expect(await answer.json()).toEqual({ ...ZERO, delivered: 1 });
  // No secret configured: nobody may drain.
  const open = drainEndpoint(ipn, '');
  expect(
    (await open(new Request('http://x.example/ipn-drain', { headers: { authorization: 'Bearer ' } }))).status,
  ).toBe(401);
});

test('Firebase: the scheduled job drains, and warns only when more was due than one pass took', async () => {
  const { ipn, credited } = await routerWithCrashedEntry();
  const warn = jest.spyOn(console, 'warn').mockImplementation(() => {});
  await drainJob(ipn)();
  expect(credited).toHaveLength(1);
  expect(warn).not.toHaveBeenCalled();
  warn.mockRestore();
});
