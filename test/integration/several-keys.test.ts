import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createPool } from 'mysql2/promise';
import { Pool } from 'pg';
import {
  createStatusClient,
  ipnRouter,
  MemoryStore,
  StatusRateLimitError,
  TransactionNotFoundError,
  type IpnRouter,
  type Store,
} from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import { PostgresStore } from 'ipn-kit/postgres';
import { SqliteStore } from 'ipn-kit/sqlite';
import { RedisStore, redisGuard } from 'ipn-kit/redis';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import type { StatusClientOptions } from '../../lib/status/status-client.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';
import { until } from '../helpers/until.js';
import { databaseUrl, describeWithService, mysqlUrl, redisUrl } from '../helpers/services.js';

// The service issues an API key per currency zone and answers "not found" to a key that did not create the
// transaction: the fake provider holds two accounts, A (its default key) and B.
const KEYS = { zoneA: 'key-of-zone-a', zoneB: 'key-of-zone-b' };

let provider: FakeProvider;
const servers: Running[] = [];
const routers: IpnRouter[] = [];
beforeEach(async () => {
  provider = await createFakeProvider({
    apiKey: KEYS.zoneA,
    apiKeys: { zoneB: KEYS.zoneB },
    resendIntervalMs: 10,
  });
});
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
  await Promise.all(routers.splice(0).map((router) => router.close()));
  await provider.close();
});

/** Serves `ipn` (closed after the test, as its server): its recorder, and the server. */
async function serve(ipn: IpnRouter) {
  routers.push(ipn);
  const recorder = recordEvents(ipn);
  const running = await listen(ipn);
  servers.push(running);
  return { recorder, running };
}

/** The keys every status request carried, in order, with the id it asked about. */
function keysSent() {
  const sent: Array<{ key: string; id: string }> = [];
  const fetch: typeof globalThis.fetch = (input, init) => {
    const body = JSON.parse(init?.body as string) as { api_key: string; transaction_ids: string };
    sent.push({ key: body.api_key, id: body.transaction_ids });
    return globalThis.fetch(input, init);
  };
  return { sent, fetch, keysFor: (id: string) => sent.filter((s) => s.id === id).map((s) => s.key) };
}

/**
 * Status requests as if the service held `id` under zone B's key too, as another transaction (FAILED, amount
 * 100): zone B's answers are zone A's record so altered. The keys every request carried are kept.
 */
function collidingFetch(id: string) {
  const keys: string[] = [];
  const fetch: typeof globalThis.fetch = async (input, init) => {
    const body = JSON.parse(init?.body as string) as { api_key: string; transaction_ids: string };
    keys.push(body.api_key);
    if (body.api_key !== KEYS.zoneB || body.transaction_ids !== id) return globalThis.fetch(input, init);
    const zoneA = JSON.stringify({ ...body, api_key: KEYS.zoneA });
    const answer = await globalThis.fetch(input, { ...init, body: zoneA });
    const json = (await answer.json()) as { data: Record<string, unknown> };
    json.data = { ...json.data, state: 'FAILED', amount: 100 };
    return new Response(JSON.stringify(json), { headers: { 'content-type': 'application/json' } });
  };
  return { fetch, keys };
}

function client(options: Partial<StatusClientOptions> = {}, fetch?: typeof globalThis.fetch) {
  return createStatusClient({
    baseUrl: provider.statusBaseUrl,
    apiKeys: KEYS,
    logger: quiet,
    retryDelayMs: 1,
    ...(fetch ? { fetch } : {}),
    ...options,
  });
}

/** A transaction of zone B (or of zone A, the provider's default key), final and never notified. */
async function paymentOfZoneB(customData = 'order-b', zone: 'zoneA' | 'zoneB' = 'zoneB'): Promise<string> {
  const { transactionId } = provider.initiate({
    amount: 5000,
    ipnUrl: 'http://127.0.0.1:9/unused',
    customData,
    outcome: 'SUCCESSFUL',
    deliver: false,
    ...(zone === 'zoneB' ? { account: 'zoneB' } : {}),
  });
  await until(() => provider.transaction(transactionId)?.state === 'SUCCESSFUL', 'processing');
  return transactionId;
}

describe('createStatusClient({ apiKeys }) against a service with two accounts', () => {
  test("the fake service answers not found to a key that did not create the transaction (today's single-key bug)", async () => {
    const id = await paymentOfZoneB();
    const zoneAOnly = createStatusClient({
      baseUrl: provider.statusBaseUrl,
      apiKey: KEYS.zoneA,
      logger: quiet,
    });
    await expect(zoneAOnly.getStatus(id)).rejects.toBeInstanceOf(TransactionNotFoundError);
    expect(zoneAOnly.accounts).toEqual(['default']);
  });

  test('an id of unknown account is asked with each key in turn until one finds it; the finder is asked first next time', async () => {
    const id = await paymentOfZoneB();
    const { fetch, keysFor } = keysSent();
    const status = client({ minIntervalMs: 0 }, fetch);
    expect(await status.getStatus(id)).toMatchObject({ transaction_id: id, state: 'SUCCESSFUL' });
    expect(keysFor(id)).toEqual([KEYS.zoneA, KEYS.zoneB]);
    expect(status.accounts).toEqual(['zoneA', 'zoneB']);
    // A final answer is cached by zone B's guard; zone A's not-found (minIntervalMs 0) is not reused: B is
    // asked first, from its cache, and A never again.
    expect(await status.getStatus(id)).toMatchObject({ state: 'SUCCESSFUL' });
    expect(keysFor(id)).toEqual([KEYS.zoneA, KEYS.zoneB]);
  });

  test("getStatus(id, { account }) asks with that account's key only, when it finds the id", async () => {
    const id = await paymentOfZoneB();
    const { fetch, keysFor } = keysSent();
    const status = client({}, fetch);
    expect(await status.getStatus(id, { account: 'zoneB' })).toMatchObject({ state: 'SUCCESSFUL' });
    expect(keysFor(id)).toEqual([KEYS.zoneB]);
    await expect(status.getStatus(id, { account: 'zoneC' })).rejects.toThrow(/unknown account "zoneC"/);
  });

  test('an id no key created is not found only once every key said so', async () => {
    const { fetch, keysFor } = keysSent();
    const status = client({}, fetch);
    await expect(status.getStatus('NOPE.000001')).rejects.toBeInstanceOf(TransactionNotFoundError);
    expect(keysFor('NOPE.000001')).toEqual([KEYS.zoneA, KEYS.zoneB]);
  });

  test("each key has its own budget: zone A's spent does not stop zone B, and makes an unknown id 'can't tell yet', never not found", async () => {
    const id = await paymentOfZoneB();
    const { fetch, keysFor } = keysSent();
    const status = client({ maxQueriesPerMinute: 1 }, fetch);
    // Zone A's one request this minute.
    const ofZoneA = await paymentOfZoneB('order-a', 'zoneA');
    expect(await status.getStatus(ofZoneA, { account: 'zoneA' })).toMatchObject({ state: 'SUCCESSFUL' });
    // Zone B still asks; zone A refuses locally (nothing sent), and B finds it.
    expect(await status.getStatus(id)).toMatchObject({ state: 'SUCCESSFUL' });
    expect(keysFor(id)).toEqual([KEYS.zoneB]);
    // Now both are spent: an id neither could ask about is not "unknown".
    const refused = status.getStatus('NOPE.000002');
    await expect(refused).rejects.toBeInstanceOf(StatusRateLimitError);
    await expect(refused).rejects.toMatchObject({ reason: 'budget' });
    expect(keysFor('NOPE.000002')).toEqual([]);
    expect(status.stats.accounts?.zoneA).toMatchObject({ queries: 1, budgetLeft: 0 });
    expect(status.stats.accounts?.zoneB).toMatchObject({ queries: 1, budgetLeft: 0 });
    expect(status.stats.queries).toBe(2);
  });

  test('apiKeys as a function, with accounts: asked at each query', async () => {
    const id = await paymentOfZoneB();
    const asked: string[] = [];
    const status = client({
      apiKeys: (account) => {
        asked.push(account);
        return account === 'zoneA' ? KEYS.zoneA : KEYS.zoneB;
      },
      accounts: ['zoneA', 'zoneB'],
    });
    expect(await status.getStatus(id)).toMatchObject({ state: 'SUCCESSFUL' });
    expect(asked).toEqual(['zoneA', 'zoneB']);
  });

  test("apiKeys as a function that throws for one account: the other's payments are found, and an unknown id is 'can't tell yet', never not found", async () => {
    const id = await paymentOfZoneB();
    const status = client({
      apiKeys: (account) => {
        if (account === 'zoneA') throw new Error('the secret store is down');
        return KEYS.zoneB;
      },
      accounts: ['zoneA', 'zoneB'],
    });
    expect(await status.getStatus(id)).toMatchObject({ state: 'SUCCESSFUL' });
    const unknown = status.getStatus('NOPE.000003');
    await expect(unknown).rejects.not.toBeInstanceOf(TransactionNotFoundError);
    await expect(unknown).rejects.toThrow(/apiKeys\(zoneA\) threw: the secret store is down/);
  });

  test('the options are checked: clear TypeErrors', () => {
    const make = (options: Record<string, unknown>) => () =>
      createStatusClient({ baseUrl: provider.statusBaseUrl, ...options });
    expect(make({})).toThrow(/apiKey \(a non-empty string\) or apiKeys/);
    expect(make({ apiKeys: {} })).toThrow(/apiKeys must name at least one account/);
    expect(make({ apiKeys: { zoneA: 42 } })).toThrow(/apiKeys.zoneA must be a non-empty string/);
    expect(make({ apiKeys: { zoneA: '' } })).toThrow(/apiKeys.zoneA must be a non-empty string/);
    expect(make({ apiKeys: { a: 'k', b: 'k' } })).toThrow(/one key under two accounts/);
    expect(make({ apiKey: 'k', apiKeys: { a: 'k' } })).toThrow(/not both/);
    expect(make({ apiKeys: () => 'k' })).toThrow(/needs accounts/);
    expect(make({ apiKeys: () => 'k', accounts: ['a', 'a'] })).toThrow(/twice/);
    expect(make({ apiKeys: { a: 'k' }, accounts: ['a'] })).toThrow(
      /accounts goes with apiKeys as a function/,
    );
    const unscoped = { ...redisGuard({ client: new Redis({ lazyConnect: true }) }), scoped: undefined };
    expect(make({ apiKeys: KEYS, shared: unscoped })).toThrow(/scoped\(account\)/);
  });
});

describe('the router with several keys', () => {
  test('a genuine payment of zone B, notified with no expectation, is verified with the keys in turn and emitted, not rejected', async () => {
    const { fetch, keysFor } = keysSent();
    const ipn = ipnRouter({ verify: client({}, fetch), logger: quiet, verifyRetryDelayMs: 5 });
    const { recorder, running } = await serve(ipn);
    const { transactionId, delivered } = provider.initiate({
      amount: 5000,
      ipnUrl: `${running.url}/`,
      customData: 'order-b',
      outcome: 'SUCCESSFUL',
      account: 'zoneB',
    });
    expect(await delivered).toMatchObject({ acknowledged: true });
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(recorder.count('rejected')).toBe(0);
    expect(keysFor(transactionId)).toEqual([KEYS.zoneA, KEYS.zoneB]);
  });

  for (const delivery of ['at-most-once', 'at-least-once'] as const) {
    test(`${delivery}: a notification of a transaction expected under zone B is verified with zone B's key only`, async () => {
      const { fetch, keysFor } = keysSent();
      const ipn = ipnRouter({
        store: new MemoryStore(),
        delivery,
        verify: client({}, fetch),
        logger: quiet,
        verifyRetryDelayMs: 5,
        sweepIntervalMs: 2 ** 31 - 1,
      });
      const { recorder, running } = await serve(ipn);
      const transactionId = `ZB.${randomUUID().slice(0, 8)}`;
      await ipn.expect(transactionId, { amount: 800, customData: 'order-zb', account: 'zoneB' });
      provider.initiate({
        transactionId,
        amount: 800,
        ipnUrl: `${running.url}/`,
        customData: 'order-zb',
        outcome: 'SUCCESSFUL',
        account: 'zoneB',
      });
      await until(() => recorder.count('successful') === 1, 'the successful event');
      expect(recorder.count('rejected')).toBe(0);
      expect(keysFor(transactionId)).toEqual([KEYS.zoneB]);
    });
  }

  test('accountOf(notification) names the account: only that key verifies it', async () => {
    const { fetch, keysFor } = keysSent();
    const ipn = ipnRouter({
      verify: client({}, fetch),
      accountOf: (n) => (n.custom_data.startsWith('b-') ? 'zoneB' : 'zoneA'),
      logger: quiet,
      verifyRetryDelayMs: 5,
    });
    const { recorder, running } = await serve(ipn);
    const { transactionId } = provider.initiate({
      amount: 700,
      ipnUrl: `${running.url}/`,
      customData: 'b-order',
      outcome: 'SUCCESSFUL',
      account: 'zoneB',
    });
    await until(() => recorder.count('successful') === 1, 'the successful event');
    expect(keysFor(transactionId)).toEqual([KEYS.zoneB]);
  });

  test('ipn.expect() checks the account against the status client: TypeErrors', async () => {
    const withKeys = ipnRouter({ statusClient: client(), logger: quiet, sweepIntervalMs: 2 ** 31 - 1 });
    const oneKey = ipnRouter({
      statusClient: createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: 'k', logger: quiet }),
      logger: quiet,
      sweepIntervalMs: 2 ** 31 - 1,
    });
    const none = ipnRouter({ logger: quiet });
    routers.push(withKeys, oneKey, none);
    await expect(withKeys.expect('EXP.1', { account: 'zoneC' })).rejects.toThrow(
      /unknown account zoneC \(known: zoneA, zoneB\)/,
    );
    await expect(withKeys.expect('EXP.1', { account: '' })).rejects.toThrow(/non-empty string/);
    await expect(withKeys.expect('EXP.1', { account: 7 as never })).rejects.toThrow(TypeError);
    await expect(oneKey.expect('EXP.1', { account: 'zoneB' })).rejects.toThrow(/known: default/);
    await expect(none.expect('EXP.1', { account: 'zoneB' })).rejects.toThrow(/has no apiKeys/);
    expect(() => ipnRouter({ accountOf: 'zoneB' as never })).toThrow(/accountOf must be a function/);
  });
});

/** The client's warning that an id was found under another account than the one named for it. */
const FOUND_ELSEWHERE = /found under account zoneB, not under zoneA, the account named for it/;

describe('an account named wrongly (the expectation, accountOf, the call): its not-found is not final', () => {
  /**
   * A router verifying with both keys, `accountOf` as given; the client's warnings kept. A not-found is
   * asked again at once (`minIntervalMs: 0`): a wrong one is a `rejected` event, not a wait.
   */
  async function bothKeysRouter(
    options: { accountOf?: () => string; delivery?: 'at-most-once' | 'at-least-once' } = {},
  ) {
    const { fetch, keysFor, sent } = keysSent();
    const { said, logger } = warnings();
    const ipn = ipnRouter({
      store: new MemoryStore(),
      delivery: options.delivery ?? 'at-most-once',
      verify: client({ logger, minIntervalMs: 0 }, fetch),
      logger: quiet,
      verifyRetryDelayMs: 5,
      retryDelayMs: 5,
      recoveryIntervalMs: 20,
      sweepIntervalMs: 2 ** 31 - 1,
      ...(options.accountOf ? { accountOf: options.accountOf } : {}),
    });
    const { recorder, running } = await serve(ipn);
    return { ipn, recorder, said, keysFor, sent, ipnUrl: `${running.url}/` };
  }

  test('getStatus(id, { account: A }) of a zone-B id: A says not found, B is asked and answers, a warning; asked again, both answer from their caches', async () => {
    const id = await paymentOfZoneB();
    const { fetch, keysFor } = keysSent();
    const { said, logger } = warnings();
    const status = client({ logger }, fetch);
    expect(await status.getStatus(id, { account: 'zoneA' })).toMatchObject({ state: 'SUCCESSFUL' });
    expect(keysFor(id)).toEqual([KEYS.zoneA, KEYS.zoneB]);
    expect(said.filter((line) => FOUND_ELSEWHERE.test(line))).toHaveLength(1);
    // Zone A's not-found is reused for minIntervalMs, zone B's final answer for good: no request.
    const told: string[] = [];
    const onQuery = (account: string) => void told.push(account);
    expect(await status.getStatus(id, { account: 'zoneA', onQuery })).toMatchObject({ state: 'SUCCESSFUL' });
    expect(keysFor(id)).toEqual([KEYS.zoneA, KEYS.zoneB]);
    expect(told).toEqual(['zoneA', 'zoneB']);
  });

  test('a partner naming the wrong account for every payment: one warning per pair of accounts, saying what to fix, not one per query', async () => {
    const ids = await Promise.all(Array.from({ length: 8 }, (_, i) => paymentOfZoneB(`order-wrong-${i}`)));
    const { said, logger } = warnings();
    const status = client({ logger, maxQueriesPerMinute: 100 });
    for (const id of ids)
      expect(await status.getStatus(id, { account: 'zoneA' })).toMatchObject({ state: 'SUCCESSFUL' });
    // A zone-A payment named zone B: another pair of accounts, its own first line.
    const ofZoneA = await paymentOfZoneB('order-a-named-b', 'zoneA');
    expect(await status.getStatus(ofZoneA, { account: 'zoneB' })).toMatchObject({ state: 'SUCCESSFUL' });
    const lines = said.filter((line) => /found under account/.test(line));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(FOUND_ELSEWHERE);
    expect(lines[0]).toMatch(
      /name account zoneB for such transactions \(in ipn\.expect\(id, \{ account \}\)/,
    );
    expect(lines[1]).toMatch(/found under account zoneA, not under zoneB/);
  });

  test("the account named is asked first even after another key found the id: that key's record never answers in its place", async () => {
    const id = await paymentOfZoneB('order-a', 'zoneA');
    const { fetch, keys } = collidingFetch(id);
    const status = client({}, fetch);
    expect(await status.getStatus(id, { account: 'zoneB' })).toMatchObject({ state: 'FAILED', amount: 100 });
    expect(await status.getStatus(id, { account: 'zoneA' })).toMatchObject({
      state: 'SUCCESSFUL',
      amount: 5000,
    });
    expect(keys).toEqual([KEYS.zoneB, KEYS.zoneA]);
  });

  test("a forged copy whose accountOf names the other zone never gets a genuine payment of the zone named verified on that zone's record", async () => {
    const id = await paymentOfZoneB('order-a', 'zoneA');
    const { fetch } = collidingFetch(id);
    const ipn = ipnRouter({
      store: new MemoryStore(),
      verify: client({ minIntervalMs: 0 }, fetch),
      accountOf: (n) => (n.custom_data.startsWith('b-') ? 'zoneB' : 'zoneA'),
      logger: quiet,
      verifyRetryDelayMs: 5,
      sweepIntervalMs: 2 ** 31 - 1,
    });
    const { recorder, running } = await serve(ipn);
    // A forger's FAILED copy, its custom_data naming zone B: zone B's key answers (and is remembered).
    await provider.forge({
      ipnUrl: `${running.url}/`,
      transactionId: id,
      state: 'FAILED',
      customData: 'b-x',
    });
    await until(() => recorder.count('rejected') === 1, 'the forgery rejected');
    // The genuine SUCCESSFUL copy, named zone A: verified on zone A's record, not rejected on zone B's.
    await provider.forge({ ipnUrl: `${running.url}/`, transactionId: id });
    await until(() => recorder.count('successful') + recorder.count('rejected') > 1, 'an outcome');
    expect(recorder.count('rejected')).toBe(1);
    expect(recorder.of('successful')).toMatchObject([{ transaction_id: id, amount: 5000 }]);
  });

  test('an id no key created is not found once every key said so, one query per key; check({ account }) checks that key only', async () => {
    const { fetch, keysFor, sent } = keysSent();
    const { said, logger } = warnings();
    const status = client({ logger }, fetch);
    await expect(status.getStatus('NOPE.NAMED', { account: 'zoneA' })).rejects.toBeInstanceOf(
      TransactionNotFoundError,
    );
    expect(keysFor('NOPE.NAMED')).toEqual([KEYS.zoneA, KEYS.zoneB]);
    expect(said.some((line) => /found under account/.test(line))).toBe(false);
    const before = sent.length;
    expect(await status.check({ account: 'zoneA' })).toMatchObject({ ok: true });
    expect(sent.slice(before).map((s) => s.key)).toEqual([KEYS.zoneA]);
  });

  test("a key that can't tell after the named one's not-found makes it 'can't tell yet', never not found", async () => {
    const { fetch, keysFor } = keysSent();
    const status = client(
      { apiKeys: (account) => (account === 'zoneA' ? KEYS.zoneA : ''), accounts: ['zoneA', 'zoneB'] },
      fetch,
    );
    const answer = status.getStatus('NOPE.HALF', { account: 'zoneA' });
    await expect(answer).rejects.not.toBeInstanceOf(TransactionNotFoundError);
    await expect(answer).rejects.toThrow(/apiKeys\(zoneB\) gave no key/);
    expect(keysFor('NOPE.HALF')).toEqual([KEYS.zoneA]);
  });

  for (const delivery of ['at-most-once', 'at-least-once'] as const) {
    test(`${delivery}: a zone-B payment expected under zone A is verified with zone B's key after A's not-found, and emitted, with a warning`, async () => {
      const { ipn, recorder, said, keysFor, ipnUrl } = await bothKeysRouter({ delivery });
      const transactionId = `ZB.${randomUUID().slice(0, 8)}`;
      await ipn.expect(transactionId, { amount: 830, customData: 'order-misnamed', account: 'zoneA' });
      provider.initiate({
        transactionId,
        amount: 830,
        ipnUrl,
        customData: 'order-misnamed',
        outcome: 'SUCCESSFUL',
        account: 'zoneB',
      });
      const outcomes = () =>
        recorder.count('successful') + recorder.count('rejected') + recorder.count('dead');
      await until(() => outcomes() > 0, 'an outcome');
      expect(recorder.count('rejected') + recorder.count('dead')).toBe(0);
      expect(recorder.of('successful').map((n) => n.transaction_id)).toEqual([transactionId]);
      expect(keysFor(transactionId)).toEqual([KEYS.zoneA, KEYS.zoneB]);
      expect(said.some((line) => FOUND_ELSEWHERE.test(line))).toBe(true);
    });
  }

  test('accountOf guessing zone A for a zone-B payment: verified with zone B after A, emitted, with a warning', async () => {
    const { recorder, said, keysFor, ipnUrl } = await bothKeysRouter({ accountOf: () => 'zoneA' });
    const { transactionId } = provider.initiate({
      amount: 840,
      ipnUrl,
      customData: 'order-guessed',
      outcome: 'SUCCESSFUL',
      account: 'zoneB',
    });
    await until(() => recorder.count('successful') + recorder.count('rejected') > 0, 'an outcome');
    expect(recorder.count('rejected')).toBe(0);
    expect(recorder.of('successful').map((n) => n.transaction_id)).toEqual([transactionId]);
    expect(keysFor(transactionId)).toEqual([KEYS.zoneA, KEYS.zoneB]);
    expect(said.some((line) => FOUND_ELSEWHERE.test(line))).toBe(true);
  });

  test('the sweep of a zone-B payment expected under zone A reconciles it, asking zone B after A', async () => {
    const id = await paymentOfZoneB('order-swept');
    const { fetch, keysFor } = keysSent();
    const { said, logger } = warnings();
    const ipn = ipnRouter({
      store: new MemoryStore(),
      statusClient: client({ logger }, fetch),
      logger: quiet,
      reconcileAfterMs: 1,
      sweepIntervalMs: 2 ** 31 - 1,
    });
    routers.push(ipn);
    const recorder = recordEvents(ipn);
    await ipn.expect(id, { amount: 5000, customData: 'order-swept', account: 'zoneA' });
    await new Promise((resolve) => setTimeout(resolve, 5));
    // One status query per key asked: zone A's not-found, then zone B's find.
    expect(await ipn.sweep()).toMatchObject({ queried: 2, reconciled: 1, stale: 0 });
    await settle();
    expect(recorder.of('successful').map((n) => n.transaction_id)).toEqual([id]);
    expect(recorder.count('stale')).toBe(0);
    expect(keysFor(id)).toEqual([KEYS.zoneA, KEYS.zoneB]);
    expect(said.some((line) => FOUND_ELSEWHERE.test(line))).toBe(true);
  });

  test("the sweep counts the query zone A made when zone B's budget, next, is spent: the expectation is put back, nothing stale", async () => {
    const id = await paymentOfZoneB('order-budget');
    const { fetch, keysFor } = keysSent();
    const status = client({ maxQueriesPerMinute: 1 }, fetch);
    const ipn = ipnRouter({
      store: new MemoryStore(),
      statusClient: status,
      logger: quiet,
      reconcileAfterMs: 1,
      sweepIntervalMs: 2 ** 31 - 1,
    });
    routers.push(ipn);
    const recorder = recordEvents(ipn);
    // Zone B's one request this minute, spent on another transaction.
    const other = await paymentOfZoneB('order-other');
    expect(await status.getStatus(other, { account: 'zoneB' })).toMatchObject({ state: 'SUCCESSFUL' });
    await ipn.expect(id, { amount: 5000, customData: 'order-budget', account: 'zoneA' });
    await new Promise((resolve) => setTimeout(resolve, 5));
    // Zone A is asked (a query made: not found), zone B refuses locally (none made): one status query.
    expect(await ipn.sweep()).toMatchObject({
      queried: 1,
      reconciled: 0,
      rejected: 0,
      stale: 0,
      swept: true,
    });
    expect(keysFor(id)).toEqual([KEYS.zoneA]);
    await settle();
    expect(recorder.count('stale') + recorder.count('successful') + recorder.count('rejected')).toBe(0);
    // The client tells of zone A only: zone B refused.
    const told: string[] = [];
    const onQuery = (account: string) => void told.push(account);
    await expect(status.getStatus(id, { account: 'zoneA', onQuery })).rejects.toBeInstanceOf(
      StatusRateLimitError,
    );
    expect(told).toEqual(['zoneA']);
  });

  test('a forged notification of an id no key created, expected under zone A, is still rejected as not found, after each key said so each time', async () => {
    const { ipn, recorder, keysFor, ipnUrl } = await bothKeysRouter();
    const transactionId = `FRG.${randomUUID().slice(0, 8)}`;
    await ipn.expect(transactionId, { amount: 5000, customData: 'order-forged', account: 'zoneA' });
    await provider.forge({ ipnUrl, transactionId, amount: 5000, customData: 'order-forged' });
    await until(() => recorder.count('rejected') === 1, 'the rejected event');
    expect(recorder.of('rejected')[0]).toMatchObject({ reason: 'not_found' });
    expect(recorder.count('successful')).toBe(0);
    // Not found is believed once repeated: two rounds, each asking each key once (never more).
    expect(keysFor(transactionId)).toEqual([KEYS.zoneA, KEYS.zoneB, KEYS.zoneA, KEYS.zoneB]);
  });

  test("a forged amount of a zone-B payment guessed under zone A is still rejected, on zone B's record", async () => {
    const id = await paymentOfZoneB('order-real');
    const { recorder, keysFor, ipnUrl } = await bothKeysRouter({ accountOf: () => 'zoneA' });
    await provider.forge({ ipnUrl, transactionId: id, amount: 50 });
    await until(() => recorder.count('rejected') === 1, 'the rejected event');
    expect(recorder.of('rejected')[0]).toMatchObject({ reason: 'mismatch', mismatches: ['amount'] });
    // Never the forged amount: only the service's own record may be delivered in its place.
    await settle();
    expect(recorder.of('successful').every((n) => n.amount === 5000)).toBe(true);
    expect(keysFor(id)).toEqual([KEYS.zoneA, KEYS.zoneB]);
  });
});

/**
 * A payment of zone B expected under `account` by one router, then swept by a second over the same store
 * (another instance): delivered once, asked with zone B's key only.
 */
async function sweptByAnotherInstance(
  store: () => Store,
  clientOptions: Partial<StatusClientOptions>,
  customData: string,
  account: string,
): Promise<void> {
  const id = await paymentOfZoneB(customData);
  const { fetch, keysFor } = keysSent();
  const options = { logger: quiet, reconcileAfterMs: 1, sweepIntervalMs: 2 ** 31 - 1 };
  const first = ipnRouter({ ...options, store: store(), statusClient: client(clientOptions, fetch) });
  routers.push(first);
  await first.expect(id, { amount: 5000, customData, account });
  await new Promise((resolve) => setTimeout(resolve, 5));
  const second = ipnRouter({ ...options, store: store(), statusClient: client(clientOptions, fetch) });
  routers.push(second);
  const recorder = recordEvents(second);
  expect(await second.sweep()).toMatchObject({ queried: 1, reconciled: 1 });
  await settle();
  expect(recorder.of('successful').map((n) => n.transaction_id)).toEqual([id]);
  expect(keysFor(id)).toEqual([KEYS.zoneB]);
}

/**
 * `ipn.expect(id, { account })` kept by the store: a second router over it (another instance, or after a
 * restart) sweeps the transaction with that account's key only.
 */
function sweepSuite(name: string, open: () => Promise<{ store: () => Store; close: () => Promise<void> }>) {
  test(`${name}: an expectation named zone B is swept with zone B's key only, by another instance, and delivered`, async () => {
    const { store, close } = await open();
    try {
      await sweptByAnotherInstance(store, {}, 'order-sweep', 'zoneB');
    } finally {
      await Promise.all(routers.splice(0).map((router) => router.close()));
      await close();
    }
  });
}

/** A logger keeping its warnings, to assert what an operator is told. */
function warnings() {
  const said: string[] = [];
  const logger = { ...quiet, warn: (_fields: unknown, message?: string) => void said.push(String(message)) };
  return { said, logger };
}

/**
 * The router's `accountOf`, and `ipn.reconcile()` of ids nobody expected, over a durable store (another
 * instance reads the expectation's account from it): never a crash, a 500 or a payment lost or rejected on
 * a wrong key's not-found.
 */
function accountSuite(name: string, open: () => Promise<{ store: () => Store; close: () => Promise<void> }>) {
  async function router(
    store: Store,
    accountOf: ((n: { custom_data: string }) => string | undefined) | undefined,
    fetch: typeof globalThis.fetch,
  ) {
    const { said, logger } = warnings();
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      verify: client({}, fetch),
      logger,
      verifyRetryDelayMs: 5,
      retryDelayMs: 5,
      recoveryIntervalMs: 20,
      maxAttempts: 3,
      sweepIntervalMs: 2 ** 31 - 1,
      ...(accountOf === undefined ? {} : { accountOf }),
    });
    const { recorder, running } = await serve(ipn);
    return { ipn, recorder, said, url: `${running.url}/` };
  }

  const cases = [
    [
      'throws',
      () => {
        throw new Error('no zone for this order');
      },
      /accountOf threw: the status query asks with each API key in turn/,
    ],
    ['names an account the client holds no key for', () => 'zoneC', /accountOf named zoneC/],
  ] as const;
  for (const [what, accountOf, warned] of cases) {
    test(`${name}: an accountOf that ${what}: answered 200, the genuine zone-B payment verified with each key in turn and delivered, a warning`, async () => {
      const { store, close } = await open();
      try {
        const { fetch, keysFor } = keysSent();
        const { recorder, said, url } = await router(store(), accountOf, fetch);
        const { transactionId, delivered } = provider.initiate({
          amount: 5100,
          ipnUrl: url,
          customData: 'order-b',
          outcome: 'SUCCESSFUL',
          account: 'zoneB',
        });
        expect(await delivered).toMatchObject({ acknowledged: true }); // answered 200
        await until(() => recorder.count('successful') === 1, 'the successful event');
        expect(recorder.count('rejected') + recorder.count('dead') + recorder.count('error')).toBe(0);
        expect(keysFor(transactionId)).toEqual([KEYS.zoneA, KEYS.zoneB]);
        expect(said.some((line) => warned.test(line))).toBe(true);
      } finally {
        await Promise.all(routers.splice(0).map((r) => r.close()));
        await close();
      }
    });
  }

  test(`${name}: an expectation's account wins over accountOf's (which names the wrong zone)`, async () => {
    const { store, close } = await open();
    try {
      const { fetch, keysFor } = keysSent();
      const { ipn, recorder, url } = await router(store(), () => 'zoneA', fetch);
      const transactionId = `ZB.${randomUUID().slice(0, 8)}`;
      await ipn.expect(transactionId, { amount: 820, customData: 'order-zb', account: 'zoneB' });
      provider.initiate({
        transactionId,
        amount: 820,
        ipnUrl: url,
        customData: 'order-zb',
        outcome: 'SUCCESSFUL',
        account: 'zoneB',
      });
      await until(() => recorder.count('successful') + recorder.count('rejected') > 0, 'an outcome');
      expect(recorder.count('rejected')).toBe(0);
      expect(recorder.count('successful')).toBe(1);
      expect(keysFor(transactionId)).toEqual([KEYS.zoneB]);
    } finally {
      await Promise.all(routers.splice(0).map((r) => r.close()));
      await close();
    }
  });

  test(`${name}: an expectation naming an account this instance holds no key for (renamed, or a rolling deploy) is swept with each key in turn, with a warning`, async () => {
    const { store, close } = await open();
    try {
      const id = await paymentOfZoneB('order-renamed');
      const { fetch, keysFor } = keysSent();
      const options = { reconcileAfterMs: 1, sweepIntervalMs: 2 ** 31 - 1 };
      const first = ipnRouter({ ...options, logger: quiet, store: store(), statusClient: client({}, fetch) });
      routers.push(first);
      await first.expect(id, { amount: 5000, customData: 'order-renamed', account: 'zoneB' });
      await new Promise((resolve) => setTimeout(resolve, 5));
      // Another instance, whose configuration names zone B's key otherwise.
      const { said, logger } = warnings();
      const renamed = client({ apiKeys: { zoneA: KEYS.zoneA, west: KEYS.zoneB } }, fetch);
      const second = ipnRouter({ ...options, logger, store: store(), statusClient: renamed });
      routers.push(second);
      const recorder = recordEvents(second);
      // One status query per key asked: zone A's not-found, then zone B's find.
      expect(await second.sweep()).toMatchObject({ queried: 2, reconciled: 1 });
      await settle();
      expect(recorder.of('successful').map((n) => n.transaction_id)).toEqual([id]);
      expect(keysFor(id)).toEqual([KEYS.zoneA, KEYS.zoneB]);
      expect(
        said.some((line) => /account zoneB, an account the status client holds no key for/.test(line)),
      ).toBe(true);
    } finally {
      await Promise.all(routers.splice(0).map((r) => r.close()));
      await close();
    }
  });

  test(`${name}: reconcile() of an id nobody expected asks each key: zone A's not-found never hides zone B's payment`, async () => {
    const { store, close } = await open();
    try {
      const id = await paymentOfZoneB('order-unexpected');
      const { fetch, keysFor } = keysSent();
      const options = { logger: quiet, sweepIntervalMs: 2 ** 31 - 1, delivery: 'at-least-once' as const };
      const ipn = ipnRouter({ ...options, store: store(), statusClient: client({}, fetch) });
      routers.push(ipn);
      const recorder = recordEvents(ipn);
      // Another transaction is expected, under zone A: expectations are in use, this id is not one.
      await ipn.expect(`ZA.${randomUUID().slice(0, 8)}`, { amount: 1, customData: 'x', account: 'zoneA' });
      await expect(ipn.reconcile(id)).resolves.toMatchObject({
        emitted: true,
        record: { state: 'SUCCESSFUL' },
      });
      await until(() => recorder.count('successful') === 1, 'the successful event');
      expect(keysFor(id)).toEqual([KEYS.zoneA, KEYS.zoneB]);
      // An id no key created is not found, once every key said so.
      await expect(ipn.reconcile('NOPE.404')).rejects.toBeInstanceOf(TransactionNotFoundError);
      expect(keysFor('NOPE.404')).toEqual([KEYS.zoneA, KEYS.zoneB]);
      expect(recorder.count('rejected')).toBe(0);
    } finally {
      await Promise.all(routers.splice(0).map((r) => r.close()));
      await close();
    }
  });
}

/** An account name as odd as a configuration may hold: quotes, a separator, braces, accents, an emoji, 200 characters. */
const ODD_ACCOUNT = `zone "B"/l'Ouest:{x}% ü 😀 ${'z'.repeat(180)}`;

/** The odd account kept by the store and read back by another instance: its key only asks. */
function oddAccountSuite(
  name: string,
  open: () => Promise<{ store: () => Store; close: () => Promise<void> }>,
) {
  test(`${name}: an account name with odd characters is kept with the expectation and swept with its key only`, async () => {
    const { store, close } = await open();
    try {
      const apiKeys = { zoneA: KEYS.zoneA, [ODD_ACCOUNT]: KEYS.zoneB };
      await sweptByAnotherInstance(store, { apiKeys }, 'order-odd', ODD_ACCOUNT);
    } finally {
      await Promise.all(routers.splice(0).map((router) => router.close()));
      await close();
    }
  });
}

describe('expectations keep their account: MemoryStore', () => {
  const open = () => {
    const shared = new MemoryStore();
    return Promise.resolve({ store: () => shared, close: async () => {} });
  };
  sweepSuite('MemoryStore', open);
  accountSuite('MemoryStore', open);
  oddAccountSuite('MemoryStore', open);
});

describeWithService('PostgreSQL', 'expectations keep their account: PostgresStore', () => {
  const open = async () => {
    const table = `ipn_test_keys_${process.pid}_${randomUUID().slice(0, 8)}`;
    const pool = new Pool({ connectionString: databaseUrl(), max: 4 });
    pool.on('error', () => {});
    await new PostgresStore({ pool, table }).migrate();
    return {
      store: () => new PostgresStore({ pool, table }),
      close: async () => {
        await pool.query(
          `DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_states", "${table}_audit", "${table}_schema", "${table}_control"`,
        );
        await pool.end();
      },
    };
  };
  sweepSuite('PostgresStore', open);
  accountSuite('PostgresStore', open);
  oddAccountSuite('PostgresStore', open);

  test('migrate() adds the account column to an expectations table made before it, and again does nothing', async () => {
    const table = `ipn_test_keys_old_${process.pid}_${randomUUID().slice(0, 8)}`;
    const pool = new Pool({ connectionString: databaseUrl(), max: 2 });
    pool.on('error', () => {});
    try {
      await new PostgresStore({ pool, table }).migrate();
      // A database at schema version 3, before the account column.
      await pool.query(`ALTER TABLE "${table}_expected" DROP COLUMN account`);
      await pool.query(`DELETE FROM "${table}_schema" WHERE version >= 4`);
      await keepsAccountAfterMigrating(new PostgresStore({ pool, table }));
    } finally {
      await pool.query(
        `DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_states", "${table}_audit", "${table}_schema", "${table}_control"`,
      );
      await pool.end();
    }
  });
});

describeWithService(
  'Redis',
  'expectations keep their account, and the fleet budget is per key: Redis',
  () => {
    const prefix = `ipn-kit-test:keys:${process.pid}:${randomUUID().slice(0, 8)}:`;
    const clients: Redis[] = [];
    const connect = async (): Promise<Redis> => {
      const redis = new Redis(redisUrl(), { lazyConnect: true });
      redis.on('error', () => {});
      await redis.connect();
      clients.push(redis);
      return redis;
    };
    afterAll(async () => {
      const [redis] = clients;
      if (redis) {
        const keys = await redis.keys(`${prefix}*`);
        const guardKeys = await redis.keys(`{${prefix}guard}:*`);
        if (keys.length + guardKeys.length > 0) await redis.del(...keys, ...guardKeys);
      }
      await Promise.all(clients.map((c) => c.quit()));
    });

    const open = async () => {
      const redis = await connect();
      const round = `${prefix}${randomUUID().slice(0, 8)}:`;
      return { store: () => new RedisStore({ client: redis, prefix: round }), close: async () => {} };
    };
    sweepSuite('RedisStore', open);
    accountSuite('RedisStore', open);
    oddAccountSuite('RedisStore', open);

    test("two instances share each key's budget through Redis, and zone A's spent does not stop zone B", async () => {
      const id = await paymentOfZoneB();
      const guardPrefix = `{${prefix}guard}:`;
      const [one, two] = [await connect(), await connect()];
      const { fetch, keysFor } = keysSent();
      const instance = (redis: Redis) =>
        client({ maxQueriesPerMinute: 1, shared: redisGuard({ client: redis, prefix: guardPrefix }) }, fetch);
      const [first, second] = [instance(one), instance(two)];
      const ofZoneA = await paymentOfZoneB('order-a', 'zoneA');
      expect(await first.getStatus(ofZoneA, { account: 'zoneA' })).toMatchObject({ state: 'SUCCESSFUL' });
      // The other instance: zone A's one request this minute is the fleet's, spent.
      await expect(second.getStatus('NOPE.A2', { account: 'zoneA' })).rejects.toMatchObject({
        reason: 'budget',
      });
      // Zone B's budget is its own.
      expect(await second.getStatus(id, { account: 'zoneB' })).toMatchObject({ state: 'SUCCESSFUL' });
      expect(keysFor(id)).toEqual([KEYS.zoneB]);
      expect(keysFor('NOPE.A2')).toEqual([]);
    });
  },
);

test("the operating page's snippet: a zone-xaf payment expected with its account is swept with its key only", async () => {
  await provider.close();
  provider = await createFakeProvider({ apiKey: 'key-xof', apiKeys: { xaf: 'key-xaf' } });
  const { zonedRouter } = await import('../../examples/snippets/several-keys.js');
  const { ipn, statusClient, startPayment } = zonedRouter(provider.statusBaseUrl);
  routers.push(ipn);
  const recorder = recordEvents(ipn);
  const { transactionId } = provider.initiate({
    amount: 900,
    ipnUrl: 'http://127.0.0.1:9/unused',
    customData: 'order-xaf',
    outcome: 'SUCCESSFUL',
    deliver: false,
    account: 'xaf',
  });
  await until(() => provider.transaction(transactionId)?.state === 'SUCCESSFUL', 'processing');
  await startPayment(transactionId, 'xaf', 900, 'order-xaf');
  expect(statusClient.accounts).toEqual(['xof', 'xaf']);
  await expect(ipn.reconcile(transactionId)).resolves.toMatchObject({ emitted: true });
  await settle();
  expect(recorder.of('successful').map((n) => n.custom_data)).toEqual(['order-xaf']);
  expect(provider.statusQueriesFor(transactionId)).toBe(1); // the xaf key only, from the expectation
});

/** A store's expectations, once `migrate()` ran twice over a table made before the account column. */
async function keepsAccountAfterMigrating(store: {
  migrate(): Promise<void>;
  expectations: NonNullable<Store['expectations']>;
}): Promise<void> {
  await store.migrate();
  await store.migrate();
  await store.expectations.put({
    transactionId: 'OLD.1',
    account: 'zoneB',
    expectedAt: 1,
    dueAt: 2,
    attempts: 0,
  });
  expect(await store.expectations.get('OLD.1')).toMatchObject({ account: 'zoneB' });
}

describeWithService('MariaDB', 'MysqlStore: migrate() adds the account column', () => {
  const open = async () => {
    const table = `ipn_test_keys_sw_${process.pid}_${randomUUID().slice(0, 6)}`;
    const pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
    await new MysqlStore({ pool, table }).migrate();
    return {
      store: () => new MysqlStore({ pool, table }),
      close: async () => {
        await pool.query(
          `DROP TABLE IF EXISTS \`${table}\`, \`${table}_expected\`, \`${table}_states\`, \`${table}_audit\`, \`${table}_schema\`, \`${table}_control\``,
        );
        await pool.end();
      },
    };
  };
  sweepSuite('MysqlStore', open);
  oddAccountSuite('MysqlStore', open);

  test('to an expectations table made before it, and again does nothing', async () => {
    const table = `ipn_test_keys_${process.pid}_${randomUUID().slice(0, 6)}`;
    const pool = createPool({ uri: mysqlUrl(), connectionLimit: 2 });
    try {
      await new MysqlStore({ pool, table }).migrate();
      await pool.query(`ALTER TABLE \`${table}_expected\` DROP COLUMN account`);
      await pool.query(`DELETE FROM \`${table}_schema\` WHERE version >= 4`);
      await keepsAccountAfterMigrating(new MysqlStore({ pool, table }));
    } finally {
      await pool.query(
        `DROP TABLE IF EXISTS \`${table}\`, \`${table}_expected\`, \`${table}_states\`, \`${table}_audit\``,
      );
      await pool.end();
    }
  });
});

describe('expectations keep their account: SqliteStore', () => {
  const open = async () => {
    const folder = mkdtempSync(join(tmpdir(), 'ipn-sqlite-keys-sweep-'));
    // A handle on one file per instance, as two processes would have.
    const opened: Database.Database[] = [new Database(join(folder, 'shared.db'))];
    await new SqliteStore({ database: opened[0]! }).migrate();
    return {
      store: () => {
        const database = new Database(join(folder, 'shared.db'));
        opened.push(database);
        return new SqliteStore({ database });
      },
      close: () => {
        for (const database of opened) database.close();
        rmSync(folder, { recursive: true, force: true });
        return Promise.resolve();
      },
    };
  };
  sweepSuite('SqliteStore', open);
  oddAccountSuite('SqliteStore', open);
});

test('SqliteStore: migrate() adds the account column to an expectations table made before it, and again does nothing', async () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-sqlite-keys-'));
  const database = new Database(join(folder, 'old.db'));
  try {
    await new SqliteStore({ database }).migrate();
    database.exec('ALTER TABLE "ipn_inbox_expected" DROP COLUMN account');
    database.exec('DELETE FROM "ipn_inbox_schema" WHERE version >= 4');
    await keepsAccountAfterMigrating(new SqliteStore({ database }));
  } finally {
    database.close();
    rmSync(folder, { recursive: true, force: true });
  }
});
