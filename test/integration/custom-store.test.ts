import request from 'supertest';
import { ipnRouter, type Store } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { EXPRESS_VERSIONS, listen, type Running, postCopies } from '../helpers/servers.js';

/**
 * An example of a custom store, as a partner would write one over their own shared key-value service
 * (here a Map behind an async API). The one rule: `claim` must be atomic, a single "set if absent".
 */
class SharedKvStore implements Store {
  readonly calls: string[] = [];
  constructor(private readonly kv: Map<string, number>) {}

  init(): void {
    this.calls.push('init');
  }

  async claim(key: string, ttlMs: number): Promise<boolean> {
    await Promise.resolve(); // a network round trip
    const expiry = this.kv.get(key);
    if (expiry !== undefined && expiry > Date.now()) return false;
    this.kv.set(key, Date.now() + ttlMs); // no await between the read and the write: atomic
    return true;
  }

  async release(key: string): Promise<void> {
    await Promise.resolve();
    this.kv.delete(key);
  }

  close(): void {
    this.calls.push('close');
  }
}

describe.each(EXPRESS_VERSIONS)('a custom store under %s', (_version, express) => {
  const servers: Running[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
  });

  async function instance(store: Store) {
    const ipn = ipnRouter({ store, logger: quiet });
    const app = express();
    app.use('/ipn', ipn);
    const running = await listen(app);
    servers.push(running);
    return { ipn, recorder: recordEvents(ipn), url: running.url };
  }

  test('two app instances sharing one store deliver concurrent copies exactly once in total', async () => {
    const kv = new Map<string, number>();
    const a = await instance(new SharedKvStore(kv));
    const b = await instance(new SharedKvStore(kv));
    const payload = uniquePayload();

    const statuses = await postCopies([b.url, a.url], payload, 20);

    expect(statuses).toEqual(Array(20).fill(200));
    expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1);
    expect(a.recorder.count('duplicate') + b.recorder.count('duplicate')).toBe(19);
    expect([...kv.keys()]).toEqual([`${String(payload.transaction_id)}:SUCCESSFUL`]);
  });

  test('the router calls init once before the first claim, and close on ipn.close()', async () => {
    const store = new SharedKvStore(new Map());
    const { ipn, url } = await instance(store);

    await request(url).post('/ipn').send(uniquePayload());
    await request(url).post('/ipn').send(uniquePayload());
    await ipn.close();

    expect(store.calls).toEqual(['init', 'close']);
  });

  // `ttl` is the deprecated name of `ttlMs`: both must reach the store as the same milliseconds.
  test.each([{ ttlMs: 60_000 }, { ttl: 60_000 }])(
    'claims use the router ttlMs (given as %o)',
    async (ttlOption) => {
      const kv = new Map<string, number>();
      const store = new SharedKvStore(kv);
      const ipn = ipnRouter({ store, logger: quiet, ...ttlOption });
      const app = express();
      app.use('/ipn', ipn);
      const running = await listen(app);
      servers.push(running);
      const before = Date.now();

      await request(running.url).post('/ipn').send(uniquePayload());

      const [expiry] = [...kv.values()];
      expect(expiry).toBeGreaterThanOrEqual(before + 60_000);
      expect(expiry).toBeLessThan(before + 120_000);
    },
  );
});
