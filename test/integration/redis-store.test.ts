import express from 'express';
import Redis from 'ioredis';
import { createClient } from 'redis';
import { ipnRouter } from 'ipn-kit';
import { StoreError } from 'ipn-kit';
import { RedisStore } from 'ipn-kit/redis';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running, postCopies } from '../helpers/servers.js';
import { describeWithService, eventually, redisUrl } from '../helpers/services.js';

/** A connected client of one kind, a way to send raw commands for assertions, and a way to quit it. */
interface Connection {
  client: ConstructorParameters<typeof RedisStore>[0]['client'];
  raw: (args: string[]) => Promise<unknown>;
  quit: () => Promise<void>;
}

async function ioredis(): Promise<Connection> {
  const client = new Redis(redisUrl(), { lazyConnect: true });
  client.on('error', () => {});
  await client.connect();
  return {
    client,
    raw: ([command, ...args]) => client.call(command!, ...args),
    quit: async () => void (await client.quit()),
  };
}

async function nodeRedis(): Promise<Connection> {
  const client = createClient({ url: redisUrl() });
  client.on('error', () => {});
  await client.connect();
  return { client, raw: (args) => client.sendCommand(args), quit: () => client.close() };
}

const CLIENTS: Array<[string, () => Promise<Connection>]> = [
  ['ioredis', ioredis],
  ['node-redis', nodeRedis],
];

/**
 * A client that sends through `connection` and records each command it sends (its name and arguments);
 * `refuse` may answer a command instead, with a rejection, as a proxy or a failing Redis would.
 */
function recording(connection: Connection, refuse?: (args: string[]) => Error | undefined) {
  const sent: string[][] = [];
  const send = (args: string[]): Promise<unknown> => {
    sent.push(args);
    const refused = refuse?.(args);
    return refused ? Promise.reject(refused) : connection.raw(args);
  };
  const client = { call: (...args: string[]) => send(args) };
  const scripts = () => sent.filter(([name]) => name === 'EVALSHA' || name === 'EVAL');
  return { client, scripts, forget: () => void sent.splice(0) };
}

/** A proxy in front of a sharded Redis: it refuses a script of several keys. */
const crossSlot = (args: string[]): Error | undefined =>
  args[0]!.startsWith('EVAL') && Number(args[2]) > 1
    ? new Error("CROSSSLOT Keys in request don't hash to the same slot")
    : undefined;

/**
 * A server that refuses, with `message`, a script naming the other key of a cross-check: a claim naming the
 * key's inbox entry, or a receive naming the key's claim (its last argument).
 */
const refusingCrossChecks =
  (prefix: string, message: string) =>
  (args: string[]): Error | undefined =>
    args[0]!.startsWith('EVAL') &&
    (args.some((arg) => arg.startsWith(`${prefix}{inbox}:e:`)) ||
      (args[3] === `${prefix}{inbox}:` && args.at(-1) === `${prefix}${args[4]}`))
      ? new Error(message)
      : undefined;

/** What a claim writes: its token. */
const UUID = /^[0-9a-f-]{36}$/;

describeWithService('Redis', 'RedisStore', () => {
  describe.each(CLIENTS)('with %s', (kind, connect) => {
    // Unique per file, worker process and client kind, so suites can share one Redis at the same time.
    const prefix = `ipn-kit-test:redis-store:${process.pid}:${kind}:`;
    const connections: Connection[] = [];
    const servers: Running[] = [];
    let sequence = 0;
    const uniqueKey = () => `TX.${(sequence += 1)}:SUCCESSFUL`;

    async function open(): Promise<Connection> {
      const connection = await connect();
      connections.push(connection);
      return connection;
    }

    afterEach(async () => {
      await Promise.all(servers.splice(0).map((server) => server.close()));
    });

    afterAll(async () => {
      const [first] = connections;
      if (first) {
        // Every key this file wrote starts with its prefix; they would expire, but tidy up now.
        let cursor = '0';
        do {
          const [next, keys] = (await first.raw([
            'SCAN',
            cursor,
            'MATCH',
            `${prefix}*`,
            'COUNT',
            '1000',
          ])) as [string, string[]];
          if (keys.length > 0) await first.raw(['DEL', ...keys]);
          cursor = next;
        } while (cursor !== '0');
      }
      await Promise.all(connections.map((connection) => connection.quit()));
    });

    test('a claim answers true for a new key, then false while the key lives', async () => {
      const { client } = await open();
      const store = new RedisStore({ client, prefix });
      const key = uniqueKey();

      const first = await store.claim(key, 60_000);
      const second = await store.claim(key, 60_000);

      expect(first).toBe(true);
      expect(second).toBe(false);
    });

    test('list() checks its options as every store does: a bad status or order is a TypeError', async () => {
      const { client } = await open();
      const store = new RedisStore({ client, prefix });
      await expect(store.list({ status: 'gone' as never })).rejects.toThrow(
        /RedisStore\.list: status must be one of/,
      );
      await expect(store.list({ order: 'sideways' as never })).rejects.toThrow(TypeError);
      await expect(store.list({ limit: -1 })).rejects.toThrow(
        /RedisStore\.list: limit must be a whole number/,
      );
    });

    test('a claim expires after its ttl, then the key can be claimed again', async () => {
      const { client, raw } = await open();
      const store = new RedisStore({ client, prefix });
      const key = uniqueKey();

      // Long enough that a loaded machine reads the key before it expires (50 ms did not always).
      expect(await store.claim(key, 2_000)).toBe(true);
      const ttl = Number(await raw(['PTTL', prefix + key]));
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(2_000);
      expect(await store.claim(key, 2_000)).toBe(false);

      await eventually('the claim expired and the key was claimed again', () => store.claim(key, 60_000));
      expect(await store.claim(key, 60_000)).toBe(false);
    });

    test('keys live under the prefix, and stores with different prefixes do not see each other', async () => {
      const { client, raw } = await open();
      const a = new RedisStore({ client, prefix: `${prefix}a:` });
      const b = new RedisStore({ client, prefix: `${prefix}b:` });
      const key = uniqueKey();

      expect(await a.claim(key, 60_000)).toBe(true);
      expect(await b.claim(key, 60_000)).toBe(true);

      expect(await raw(['GET', `${prefix}a:${key}`])).toMatch(UUID);
      expect(await raw(['GET', `${prefix}b:${key}`])).toMatch(UUID);
      expect(await a.claim(key, 60_000)).toBe(false);
    });

    test("the prefix defaults to 'ipn-kit:'", async () => {
      const { client, raw } = await open();
      const store = new RedisStore({ client });
      const key = `${prefix}${uniqueKey()}`;

      expect(store.prefix).toBe('ipn-kit:');
      expect(await store.claim(key, 60_000)).toBe(true);
      expect(await raw(['GET', `ipn-kit:${key}`])).toMatch(UUID);
      await store.release(key);
    });

    test('a Redis that forgot the claim script (restart, SCRIPT FLUSH) is sent it again, and claims still work', async () => {
      const { client, raw } = await open();
      const store = new RedisStore({ client, prefix });
      const key = uniqueKey();
      await raw(['SCRIPT', 'FLUSH']);
      expect(await store.claim(key, 60_000, 'token-1')).toBe(true);
      await raw(['SCRIPT', 'FLUSH']);
      expect(await store.claim(key, 60_000, 'token-2')).toBe(false);
    });

    test('the same claim asked twice (its answer was lost) answers true again; another claim answers false', async () => {
      const { client } = await open();
      const store = new RedisStore({ client, prefix });
      const key = uniqueKey();
      expect(await store.claim(key, 60_000, 'token-1')).toBe(true);
      expect(await store.claim(key, 60_000, 'token-1')).toBe(true);
      expect(await store.claim(key, 60_000, 'token-2')).toBe(false);
      expect(await store.claim(key, 60_000)).toBe(false);
    });

    test('release deletes the key, so the next claim of it succeeds', async () => {
      const { client, raw } = await open();
      const store = new RedisStore({ client, prefix });
      const key = uniqueKey();
      await store.claim(key, 60_000);

      await store.release(key);

      expect(await raw(['EXISTS', prefix + key])).toBe(0);
      expect(await store.claim(key, 60_000)).toBe(true);
    });

    test('50 concurrent claims of one key through two connections: exactly one answers true', async () => {
      const stores = [
        new RedisStore({ client: (await open()).client, prefix }),
        new RedisStore({ client: (await open()).client, prefix }),
      ];
      const key = uniqueKey();

      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => stores[i % 2]!.claim(key, 60_000)),
      );

      expect(results.every((result) => typeof result === 'boolean')).toBe(true);
      expect(results.filter((result) => result)).toHaveLength(1);
    });

    test('claims made together go as one script, each answered as if alone', async () => {
      const connection = await open();
      const { client, scripts, forget } = recording(connection);
      const store = new RedisStore({ client, prefix });
      const claimed = uniqueKey();
      expect(await store.claim(claimed, 60_000, 'token-0')).toBe(true);
      const keys = Array.from({ length: 30 }, () => uniqueKey());
      forget();

      const results = await Promise.all([
        ...keys.map((key) => store.claim(key, 60_000)),
        store.claim(claimed, 60_000, 'token-0'), // its own answer lost: asked again with its token
        store.claim(claimed, 60_000, 'token-1'), // another claim of it
        store.claim(keys[0]!, 60_000), // a key claimed twice in one batch: the first call wins
      ]);

      expect(results).toEqual([...keys.map(() => true), true, false, false]);
      // The first goes at once, alone (unless the claim before is still freeing its place), and the others,
      // made while it is on its way, as one more script.
      expect(scripts().length).toBeLessThanOrEqual(2);
      for (const key of keys) {
        expect(await connection.raw(['GET', prefix + key])).toMatch(UUID);
        const ttl = Number(await connection.raw(['PTTL', prefix + key]));
        expect(ttl).toBeGreaterThan(50_000);
        expect(ttl).toBeLessThanOrEqual(60_000);
      }
      expect(await Promise.all(keys.map((key) => store.claim(key, 60_000)))).toEqual(keys.map(() => false));
    });

    test('a key Redis refuses in a batch (it holds a hash) fails its own claim only, as if sent alone', async () => {
      const connection = await open();
      const store = new RedisStore({ client: connection.client, prefix });
      const [hash, ...keys] = Array.from({ length: 6 }, () => uniqueKey());
      await connection.raw(['HSET', prefix + hash, 'field', 'value']);

      const alone = await Promise.allSettled([store.claim(hash!, 60_000)]);
      const together = await Promise.allSettled([
        ...keys.slice(0, 3).map((key) => store.claim(key, 60_000)),
        store.claim(hash!, 60_000),
        ...keys.slice(3).map((key) => store.claim(key, 60_000)),
      ]);

      expect(alone).toEqual([{ status: 'rejected', reason: expect.any(StoreError) }]);
      const statuses = together.map((result) =>
        result.status === 'fulfilled' ? result.value : result.reason,
      );
      expect(statuses).toEqual([true, true, true, expect.any(StoreError), true, true]);
      expect(String(statuses[3])).toMatch(/WRONGTYPE/);
    });

    test('a batch of claims after SCRIPT FLUSH is sent as the script itself, and answers as before', async () => {
      const connection = await open();
      const store = new RedisStore({ client: connection.client, prefix });
      const keys = Array.from({ length: 10 }, () => uniqueKey());
      await connection.raw(['SCRIPT', 'FLUSH']);

      const results = await Promise.all(keys.map((key) => store.claim(key, 60_000)));
      expect(results).toEqual(keys.map(() => true));
      await connection.raw(['SCRIPT', 'FLUSH']);
      expect(await Promise.all(keys.map((key) => store.claim(key, 60_000)))).toEqual(keys.map(() => false));
    });

    test('a proxy that refuses a script of several keys (CROSSSLOT): each claim goes alone from then on, none lost', async () => {
      const connection = await open();
      const { client, scripts, forget } = recording(connection, crossSlot);
      const store = new RedisStore({ client, prefix });
      const keys = Array.from({ length: 10 }, () => uniqueKey());

      const results = await Promise.all(keys.map((key) => store.claim(key, 60_000)));

      expect(results).toEqual(keys.map(() => true));
      forget();
      expect(await Promise.all(keys.map((key) => store.claim(key, 60_000)))).toEqual(keys.map(() => false));
      expect(scripts().every(([, , count]) => count === '1')).toBe(true);
      expect(scripts()).toHaveLength(10);
    });

    test('a proxy that refuses a script of several keys (CROSSSLOT): each lifecycle decision goes alone from then on, each verdict right', async () => {
      const connection = await open();
      const { client, scripts, forget } = recording(connection, crossSlot);
      const { lifecycle } = new RedisStore({ client, prefix });
      const ids = Array.from({ length: 6 }, () => `LFC.${(sequence += 1)}`);

      // The first goes alone; the five asked while it runs go as one script, refused, then each alone.
      const paid = await Promise.all(ids.map((id) => lifecycle.decide(id, 'SUCCESSFUL', 60_000)));

      expect(paid).toEqual(ids.map(() => 'accepted'));
      expect(scripts().some(([, , count]) => count === '5')).toBe(true);
      forget();
      const failed = await Promise.all(ids.map((id) => lifecycle.decide(id, 'FAILED', 60_000)));
      expect(failed).toEqual(ids.map(() => 'conflict'));
      expect(scripts().map(([, , count]) => count)).toEqual(ids.map(() => '1'));
    });

    test('a lifecycle decision with a shorter ttlMs never shortens how long a state is kept: a SUCCESSFUL stays for the longest ttlMs asked', async () => {
      // Two routers on one store (or a deploy that lowers ttlMs): the SUCCESSFUL one accepted for an hour
      // must not expire after the second's second, or a FAILED reaching the first after that is emitted as
      // failed.
      const connection = await open();
      const { lifecycle } = new RedisStore({ client: connection.client, prefix });
      const id = `LFC.${(sequence += 1)}`;
      const hour = 3_600_000;
      expect(await lifecycle.decide(id, 'SUCCESSFUL', hour)).toBe('accepted');
      expect(await lifecycle.decide(id, 'FAILED', 1_000)).toBe('conflict');
      expect(Number(await connection.raw(['PTTL', `${prefix}state:${id}`]))).toBeGreaterThan(hour - 60_000);
      // A longer one still extends it.
      expect(await lifecycle.decide(id, 'FAILED', 2 * hour)).toBe('conflict');
      expect(Number(await connection.raw(['PTTL', `${prefix}state:${id}`]))).toBeGreaterThan(hour + 60_000);
    });

    test('a state key Redis refuses (WRONGTYPE: not a string) fails its own lifecycle decision, not the ones batched with it', async () => {
      const connection = await open();
      const { lifecycle } = new RedisStore({ client: connection.client, prefix });
      const [before, bad, after, first] = Array.from({ length: 4 }, () => `LFC.${(sequence += 1)}`);
      await connection.raw(['HSET', `${prefix}state:${bad}`, 'field', 'value']);
      // The first goes alone; the three asked while it runs go as one batch.
      const running = lifecycle.decide(first!, 'SUCCESSFUL', 60_000);
      const batch = Promise.allSettled([
        lifecycle.decide(before!, 'FAILED', 60_000),
        lifecycle.decide(bad!, 'FAILED', 60_000),
        lifecycle.decide(after!, 'SUCCESSFUL', 60_000),
      ]);
      expect(await running).toBe('accepted');
      const settled = await batch;
      expect(settled.map((result) => (result.status === 'fulfilled' ? result.value : result.reason))).toEqual(
        [
          'accepted',
          expect.objectContaining({ name: 'StoreError', message: expect.stringContaining('WRONGTYPE') }),
          'accepted',
        ],
      );
      expect(await connection.raw(['GET', `${prefix}state:${after}`])).toBe('SUCCESSFUL');
      expect(await connection.raw(['TYPE', `${prefix}state:${bad}`])).toBe('hash'); // left as it was
      await expect(lifecycle.decide(bad!, 'SUCCESSFUL', 60_000)).rejects.toThrow(StoreError); // alone too
    });

    test('a batch that fails rejects each of its claims with a StoreError; the next batch is sent', async () => {
      const connection = await open();
      let failing = true;
      const batchesFail = (args: string[]): Error | undefined =>
        failing && Number(args[2]) > 1 ? new Error('Connection is closed.') : undefined;
      const store = new RedisStore({ client: recording(connection, batchesFail).client, prefix });
      const first = store.claim(uniqueKey(), 60_000);
      const batch = Array.from({ length: 5 }, () => store.claim(uniqueKey(), 60_000));

      expect(await first).toBe(true);
      for (const claim of batch) {
        await expect(claim).rejects.toThrow(/RedisStore: the EVALSHA command failed: Connection is closed/);
      }
      failing = false;
      const keys = Array.from({ length: 5 }, () => uniqueKey());
      expect(await Promise.all(keys.map((key) => store.claim(key, 60_000)))).toEqual(keys.map(() => true));
    });

    test('close leaves the client open: it is the caller’s', async () => {
      const { client, raw } = await open();
      const store = new RedisStore({ client, prefix });

      store.close();

      expect(await raw(['PING'])).toBe('PONG');
      expect(await store.claim(uniqueKey(), 60_000)).toBe(true);
    });

    test('a claim and a receive of one key exclude each other, as in the SQL stores (instances in different delivery modes)', async () => {
      const store = new RedisStore({ client: (await open()).client, prefix });
      const lease = () => ({ id: `lease-${(sequence += 1)}`, ms: 60_000 });
      const record = { transaction_id: 'TX', state: 'SUCCESSFUL' };
      const [claimed, received, fresh, expiring] = [uniqueKey(), uniqueKey(), uniqueKey(), uniqueKey()];
      expect(await store.claim(claimed, 60_000)).toBe(true);
      expect(await store.receive(claimed, record, lease())).toBe(false);
      expect(await store.receive(received, record, lease())).toBe(true);
      // Together: one script for the lot; the received key is a duplicate, the fresh one is claimed.
      expect(await Promise.all([received, fresh].map((key) => store.claim(key, 60_000)))).toEqual([
        false,
        true,
      ]);
      expect(await store.claim(received, 60_000)).toBe(false);
      // An expired claim holds nothing.
      expect(await store.claim(expiring, 20)).toBe(true);
      await eventually('the claim expired and the key was received', () =>
        store.receive(expiring, record, lease()),
      );
    });

    test('release(key) of a claim never forgets an entry an instance at least once received as the claim went', async () => {
      const connection = await open();
      const other = new RedisStore({ client: (await open()).client, prefix });
      const record = { transaction_id: 'TX', state: 'SUCCESSFUL' };
      const key = uniqueKey();
      let received: boolean | undefined;
      // The resend reaches the other instance the moment the claim is deleted.
      const client = {
        call: async (...args: string[]) => {
          const reply = await connection.raw(args);
          if (args[0] === 'DEL' && args[1] === `${prefix}${key}`)
            received = await other.receive(key, record, { id: 'other', ms: 60_000 });
          return reply;
        },
      };
      const store = new RedisStore({ client, prefix });
      expect(await store.claim(key, 60_000)).toBe(true);

      await store.release(key);

      expect(received).toBe(true);
      expect(await other.get(key)).toMatchObject({ status: 'received' });
    });

    test('release(key) deletes the claim even when forgetting its inbox entry fails: the resend after a 503 is processed', async () => {
      const connection = await open();
      // Every inbox script refused (a Redis-compatible server that forbids undeclared keys refuses them all).
      const inbox = (args: string[]): Error | undefined =>
        args[0]!.startsWith('EVAL') && args[3] === `${prefix}{inbox}:`
          ? new Error('ERR Error running script: script tried accessing undeclared key')
          : undefined;
      const { client } = recording(connection, inbox);
      const store = new RedisStore({ client, prefix });
      const key = uniqueKey();
      expect(await store.claim(key, 60_000)).toBe(true);

      await expect(store.release(key)).rejects.toThrow(StoreError);

      expect(await store.claim(key, 60_000)).toBe(true);
    });

    test('two instances in different delivery modes deliver 20 concurrent copies once', async () => {
      const own = `${prefix}modes:`; // an inbox of its own: the other tests leave entries received
      async function instance(delivery: 'at-most-once' | 'at-least-once') {
        const store = new RedisStore({ client: (await open()).client, prefix: own });
        const ipn = ipnRouter({ store, delivery, logger: quiet, retryDelayMs: 20 });
        const app = express();
        app.use('/ipn', ipn);
        const running = await listen(app);
        servers.push(running);
        return { store, recorder: recordEvents(ipn), url: running.url };
      }
      const a = await instance('at-most-once');
      const b = await instance('at-least-once');
      const payload = uniquePayload();

      const statuses = await postCopies([b.url, a.url], payload, 20);

      expect(statuses).toEqual(Array(20).fill(200));
      const delivered = () => a.recorder.count('successful') + b.recorder.count('successful');
      await eventually('one delivered', () => delivered() >= 1);
      // The at-least-once instance delivers after its answer: wait until its inbox has nothing left to do.
      await eventually('the inbox settled', async () => {
        const counts = await b.store.countByStatus();
        return counts.received === 0 && counts.failed === 0;
      });
      expect(delivered()).toBe(1);
    });

    test('a Redis that refuses a script naming a key of another slot (a Cluster): claims and receives no longer name one, none lost', async () => {
      const connection = await open();
      const otherSlot = refusingCrossChecks(
        prefix,
        'ERR Script attempted to access keys that do not hash to the same slot',
      );
      const { client, scripts, forget } = recording(connection, otherSlot);
      const store = new RedisStore({ client, prefix });
      // The router hands the store its logger, which hears once that the check is off.
      const warned: string[] = [];
      const ipn = ipnRouter({
        store,
        logger: { ...quiet, warn: (_fields, message) => warned.push(message) },
      });
      const record = { transaction_id: 'TX', state: 'SUCCESSFUL' };
      const claimed = uniqueKey();
      expect(await store.claim(claimed, 60_000)).toBe(true);
      expect(warned.filter((message) => message.startsWith('RedisStore'))).toEqual([
        expect.stringMatching(
          /^RedisStore: this server refused a script naming a key it does not declare, so .*a resend reaching an instance of the other mode is delivered again/,
        ),
      ]);
      await ipn.close();
      expect(await store.claim(claimed, 60_000)).toBe(false);
      const received = uniqueKey();
      expect(await store.receive(received, record, { id: 'lease', ms: 60_000 })).toBe(true);
      forget();
      expect(await store.receive(received, record, { id: 'lease', ms: 60_000 })).toBe(false);
      expect(scripts()).toHaveLength(1); // no refusal: the receive named no claim
    });

    test('a Redis-compatible server that refuses a script naming a key it did not declare (Dragonfly by default): claims still answer, still batched, receives too', async () => {
      const connection = await open();
      // Dragonfly's own refusal of a script touching a key outside KEYS (its default lua flags).
      const undeclared = refusingCrossChecks(
        prefix,
        'ERR Error running script (call to f_0123): @user_script:1: script tried accessing undeclared key',
      );
      const { client: refusing, scripts, forget } = recording(connection, undeclared);
      // The first script's refusal comes late (a slow network): the claims behind it go on, together.
      let first = true;
      const client = {
        call: (...args: string[]) => {
          const sent = refusing.call(...args);
          if (!first || !args[0]!.startsWith('EVAL')) return sent;
          first = false;
          return sent.catch(
            (error: Error) => new Promise((_, reject) => setTimeout(() => reject(error), 200)),
          );
        },
      };
      const store = new RedisStore({ client, prefix });
      store.useStoreTimeout(20);
      const warned: unknown[] = [];
      store.useLogger({ ...quiet, warn: (fields) => warned.push(fields) });
      const record = { transaction_id: 'TX', state: 'SUCCESSFUL' };
      const keys = Array.from({ length: 10 }, () => uniqueKey());
      // Several claims at once: the batch behind the first is refused too, then answered all the same.
      expect(await Promise.all(keys.map((key) => store.claim(key, 60_000)))).toEqual(keys.map(() => true));
      expect(await store.claim(keys[0]!, 60_000)).toBe(false);
      expect(warned).toEqual([{ crossChecks: false, error: expect.stringMatching(/undeclared key$/) }]); // once, though two batches were refused
      const received = uniqueKey();
      expect(await store.receive(received, record, { id: 'lease', ms: 60_000 })).toBe(true);
      forget();
      // From then on, claims made together still go as one script of several keys.
      const more = Array.from({ length: 10 }, () => uniqueKey());
      expect(await Promise.all(more.map((key) => store.claim(key, 60_000)))).toEqual(more.map(() => true));
      expect(scripts().some(([, , count]) => Number(count) > 1)).toBe(true);
    });

    test('two app instances, each with its own client, deliver 20 concurrent copies exactly once', async () => {
      async function instance() {
        const ipn = ipnRouter({
          store: new RedisStore({ client: (await open()).client, prefix }),
          logger: quiet,
        });
        const app = express();
        app.use('/ipn', ipn);
        const running = await listen(app);
        servers.push(running);
        return { recorder: recordEvents(ipn), url: running.url };
      }
      const a = await instance();
      const b = await instance();
      const payload = uniquePayload();

      const statuses = await postCopies([b.url, a.url], payload, 20);

      expect(statuses).toEqual(Array(20).fill(200));
      expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1);
      expect(a.recorder.count('duplicate') + b.recorder.count('duplicate')).toBe(19);
    });
  });

  test('an ioredis client with a keyPrefix: a claim and a receive of one key still exclude each other', async () => {
    const keyPrefix = `ipn-kit-test:keyprefix:${process.pid}:`;
    const client = new Redis(redisUrl(), { keyPrefix });
    client.on('error', () => {});
    try {
      const store = new RedisStore({ client, prefix: 'p:' });
      const record = { transaction_id: 'TX', state: 'SUCCESSFUL' };
      const lease = { id: 'lease', ms: 60_000 };
      expect(await store.claim('TX.A:SUCCESSFUL', 60_000)).toBe(true);
      expect(await store.receive('TX.A:SUCCESSFUL', record, lease)).toBe(false);
      expect(await store.receive('TX.B:SUCCESSFUL', record, lease)).toBe(true);
      expect(await store.claim('TX.B:SUCCESSFUL', 60_000)).toBe(false);
    } finally {
      // keys() answers full names; del() would prefix them again.
      const plain = new Redis(redisUrl());
      const keys = await plain.keys(`${keyPrefix}*`);
      if (keys.length > 0) await plain.del(...keys);
      await Promise.all([plain.quit(), client.quit()]);
    }
  });

  test('a node-redis client that was never connected: the claim rejects, saying to connect it', async () => {
    const client = createClient({ url: redisUrl() });
    const store = new RedisStore({ client });

    await expect(store.claim('TX.1:SUCCESSFUL', 1000)).rejects.toThrow(/not connected.*client\.connect\(\)/);
  });
});

describe('RedisStore construction', () => {
  test.each([
    ['no options', undefined],
    ['no client', {}],
    ['a client of null', { client: null }],
    ['a client with neither call() nor sendCommand()', { client: { get: () => {}, set: () => {} } }],
    ['a client that is a string', { client: 'redis://localhost' }],
  ])('throws a TypeError for %s', (_case, options) => {
    expect(() => new RedisStore(options as any)).toThrow(TypeError);
  });

  test('the TypeError names both supported clients', () => {
    expect(() => new RedisStore({ client: {} as any })).toThrow(/ioredis.*node-redis/);
  });

  test('throws a TypeError for a prefix that is not a string', () => {
    const client = { call: () => Promise.resolve('OK') };
    expect(() => new RedisStore({ client, prefix: 42 as any })).toThrow(/prefix must be a string/);
  });

  test('refuses a node-redis cluster, whose sendCommand takes other arguments', () => {
    const cluster = { sendCommand: () => Promise.resolve(null), getSlotMaster: () => ({}) };
    expect(() => new RedisStore({ client: cluster })).toThrow(
      /cluster clients \(createCluster\) are not supported/,
    );
  });

  test('a claim refuses a ttl that is not a positive number of milliseconds', async () => {
    const store = new RedisStore({ client: { call: () => Promise.resolve('OK') } });
    await expect(store.claim('TX.1:SUCCESSFUL', 0)).rejects.toThrow(RangeError);
    await expect(store.claim('TX.1:SUCCESSFUL', Number.NaN)).rejects.toThrow(RangeError);
  });

  test('a claim refuses a ttl longer than Redis can hold (Number.MAX_VALUE, meant as forever) without sending it', async () => {
    // PX takes a 64-bit integer: 1e19 ms is out of range, and 1e21 is written "1e+21". Redis refused every
    // such claim with an error, so the router answered every notification 503.
    const sent: unknown[] = [];
    const store = new RedisStore({
      client: { call: (...args: unknown[]) => (sent.push(args), Promise.resolve(1)) },
    });
    for (const ttlMs of [1e19, 1e21, Number.MAX_VALUE]) {
      await expect(store.claim('TX.1:SUCCESSFUL', ttlMs)).rejects.toThrow(/at most 9007199254740991/);
    }
    expect(sent).toEqual([]);
    await expect(store.claim('TX.1:SUCCESSFUL', Number.MAX_SAFE_INTEGER)).resolves.toBe(true);
  });

  test('an unexpected reply to SET is a rejection, never a claim', async () => {
    const store = new RedisStore({ client: { sendCommand: () => Promise.resolve('QUEUED') } });
    await expect(store.claim('TX.1:SUCCESSFUL', 1000)).rejects.toThrow(/unexpected reply/);
  });

  test('an unexpected reply to a batch of claims rejects each of them, never a claim', async () => {
    const replies: unknown[] = [1, 'QUEUED', 1, [1, 1], 1, [1, 'OK', 0]];
    const store = new RedisStore({ client: { call: () => Promise.resolve(replies.shift()) } });
    /** One claim alone, and three made while it is on its way: those go together, as the next batch. */
    async function batch(): Promise<Array<PromiseSettledResult<boolean>>> {
      const alone = store.claim('TX.1:SUCCESSFUL', 1000);
      const together = [2, 3, 4].map((n) => store.claim(`TX.${n}:SUCCESSFUL`, 1000));
      expect(await alone).toBe(true);
      return Promise.allSettled(together);
    }
    const reasons = (results: Array<PromiseSettledResult<boolean>>) =>
      results.map((result) => (result.status === 'rejected' ? String(result.reason) : result.value));

    expect(reasons(await batch())).toEqual(
      Array(3).fill(expect.stringMatching(/unexpected reply.*"QUEUED"/)),
    );
    expect(reasons(await batch())).toEqual(Array(3).fill(expect.stringMatching(/unexpected reply.*\[1,1\]/)));
    expect(reasons(await batch())).toEqual([true, expect.stringMatching(/unexpected reply.*"OK"/), false]);
    expect(replies).toEqual([]);
  });

  test('an ioredis Cluster is sent one script per claim: its keys live in different slots', async () => {
    const sent: unknown[][] = [];
    const cluster = {
      isCluster: true,
      call: (...args: unknown[]) => (sent.push(args), Promise.resolve(1)),
    };
    const store = new RedisStore({ client: cluster });
    const results = await Promise.all([1, 2, 3].map((n) => store.claim(`TX.${n}:SUCCESSFUL`, 1000)));
    expect(results).toEqual([true, true, true]);
    expect(sent.map((args) => args[2])).toEqual(['1', '1', '1']);
    // Nor does a claim name the key's inbox entry, which lives in another slot.
    expect(sent.map((args) => args.at(-1))).toEqual(['', '', '']);
  });

  test('an ioredis Cluster is sent one script per lifecycle decision, as per claim: its state keys live in different slots', async () => {
    const sent: unknown[][] = [];
    const cluster = {
      isCluster: true,
      call: (...args: unknown[]) => (sent.push(args), Promise.resolve(['SUCCESSFUL'])),
    };
    const { lifecycle } = new RedisStore({ client: cluster });
    const verdicts = await Promise.all([1, 2, 3].map((n) => lifecycle.decide(`TX.${n}`, 'FAILED', 1000)));
    expect(verdicts).toEqual(['conflict', 'conflict', 'conflict']);
    expect(sent.map((args) => args.slice(2, 4))).toEqual(
      [1, 2, 3].map((n) => ['1', `ipn-kit:state:TX.${n}`]),
    );
  });
});
