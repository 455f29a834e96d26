import { randomUUID } from 'node:crypto';
import { atOnce, must, type Rule, type RuleKit } from './store-conformance-kit.js';

/** Methods every store has, and those a durable one adds. */
const STORE_METHODS = ['claim', 'release'] as const;
const DURABLE_METHODS = [
  'receive',
  'replace',
  'lease',
  'settle',
  'list',
  'get',
  'replay',
  'replayDead',
  'purge',
];

/** How many keys the concurrency rules race on at once, each with `concurrency` copies. */
const KEYS_AT_ONCE = 5;

/** The store has the methods of its kind, and says `durable: true` when it is taken as durable. */
function checkInterface(kit: RuleKit): void {
  const { store } = kit;
  for (const method of STORE_METHODS)
    must(typeof store[method] === 'function', `the store has no ${method}() method`);
  if (!kit.durable) return;
  must(
    store.durable === true,
    `durable is ${String(store.durable)}: the router takes a store as durable only when it is true`,
  );
  for (const method of DURABLE_METHODS) {
    const value: unknown = Reflect.get(store, method);
    must(typeof value === 'function', `a durable store (durable: true) has no ${method}() method`);
  }
}

/** The rules of `Store`: what the router needs of every store, durable or not (at most once: claims). */
export const CLAIM_RULES: Rule[] = [
  {
    name: 'interface',
    needs: 'store',
    run: (kit) => Promise.resolve(kit).then(checkInterface),
  },
  {
    // The router's dedupe: copies of one notification arrive at once (the service resends, two instances
    // receive one each), and exactly one of them may be delivered.
    name: 'claim-atomic',
    needs: 'store',
    async run(kit) {
      const keys = Array.from({ length: KEYS_AT_ONCE }, () => kit.key('claim-atomic'));
      const answers = await atOnce(keys.length * kit.concurrency, (index) =>
        kit.at(Math.floor(index / keys.length)).claim(keys[index % keys.length]!, kit.longMs, randomUUID()),
      );
      const odd = answers.find((answer) => typeof answer !== 'boolean');
      must(odd === undefined, `claim() resolved ${String(odd)}, not true or false`);
      keys.forEach((key, k) => {
        const won = answers.filter((answer, index) => index % keys.length === k && answer === true).length;
        must(
          won === 1,
          `${kit.concurrency} concurrent claims of ${key} (each with its own token): ${won} resolved true, ` +
            'expected exactly 1 (a read then a write is not atomic: use the backend\'s "set if absent")',
        );
      });
    },
  },
  {
    name: 'claim-held',
    needs: 'store',
    async run(kit) {
      const key = kit.key('claim-held');
      must(await kit.store.claim(key, kit.longMs, randomUUID()), `the first claim of ${key} resolved false`);
      must(
        !(await kit.store.claim(key, kit.longMs, randomUUID())),
        `a second claim of ${key} (another token) resolved true while the first one holds it`,
      );
      const other = kit.key('claim-held');
      must(
        await kit.store.claim(other, kit.longMs, randomUUID()),
        `a claim of another key (${other}) resolved false: a claim holds its own key only`,
      );
    },
  },
  {
    // The router's `ttlMs`: after it, a resend is a new notification again.
    name: 'claim-ttl',
    needs: 'store',
    async run(kit) {
      const key = kit.key('claim-ttl');
      must(await kit.store.claim(key, kit.shortMs, randomUUID()), `the first claim of ${key} resolved false`);
      await kit.eventually(`a claim of ${key} after its ${kit.shortMs} ms ttl ran out`, async () =>
        Boolean(await kit.store.claim(key, kit.longMs, randomUUID())),
      );
      must(
        !(await kit.store.claim(key, kit.longMs, randomUUID())),
        `once ${key} was claimed again after its ttl, a further claim resolved true`,
      );
    },
  },
  {
    // The router asks again when a claim's answer was lost: the same token must win again, not be a resend.
    name: 'claim-token-idempotent',
    needs: 'store',
    async run(kit) {
      const key = kit.key('claim-token');
      const token = randomUUID();
      must(await kit.store.claim(key, kit.longMs, token), `the first claim of ${key} resolved false`);
      must(
        await kit.store.claim(key, kit.longMs, token),
        `the same claim of ${key} asked again (same token, as after a lost answer) resolved false: the ` +
          'router would drop the notification as a resend; keep the token with the key',
      );
      must(
        !(await kit.store.claim(key, kit.longMs, randomUUID())),
        `a claim of ${key} with another token resolved true`,
      );
    },
  },
  {
    name: 'release',
    needs: 'store',
    async run(kit) {
      const key = kit.key('release');
      const first = randomUUID();
      must(await kit.store.claim(key, kit.longMs, first), `the first claim of ${key} resolved false`);
      await kit.store.release(key);
      must(
        await kit.store.claim(key, kit.longMs, randomUUID()),
        `a claim of ${key} after release(${key}) resolved false`,
      );
      must(
        !(await kit.store.claim(key, kit.longMs, first)),
        `the released claim's token claimed ${key} again, though a newer claim holds it`,
      );
      await kit.store.release(kit.key('release-never-claimed'));
      if (!kit.durable) return;
      // Durable: release(key) without a lease forgets the inbox entry too (the router's "not delivered
      // after all"), so that the resend is received as new.
      const received = kit.key('release');
      must(
        await kit.store.receive(received, kit.record(received), kit.lease()),
        `receive(${received}) resolved false`,
      );
      await kit.store.release(received);
      must((await kit.store.get(received)) === undefined, `get(${received}) found the entry after release()`);
      must(
        await kit.store.receive(received, kit.record(received), kit.lease()),
        `receive(${received}) after release() resolved false`,
      );
    },
  },
];
