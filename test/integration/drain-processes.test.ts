import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Pool } from 'pg';
import type { DurableStore } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import { uniquePayload } from '../helpers/payloads.js';
import { databaseUrl, describeWithService, redisUrl } from '../helpers/services.js';

// A process answers 200 and is killed before its listener finished; processes whose recovery timer is an
// hour away call ipn.drain() once: the notification is delivered once, by one of them.
jest.setTimeout(60_000);

const SCRIPT = join(__dirname, '..', 'processes', 'drain-app.ts');
/** The crashed attempt's lease: the drain processes are started before it, and drain once it ran out. */
const LEASE_MS = 1_000;

interface App {
  child: ChildProcess;
  url?: string;
  message<T>(type: string): Promise<T>;
}

function startApp(env: Record<string, string>): Promise<App> {
  const child = fork(SCRIPT, [], {
    execArgv: ['--import', 'tsx'],
    env: {
      ...process.env,
      ...env,
      LEASE_MS: String(LEASE_MS),
      REDIS_URL: redisUrl(),
      DATABASE_URL: databaseUrl(),
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const message = <T>(type: string): Promise<T> =>
    new Promise((resolve) => {
      const listener = (m: { type: string }): void => {
        if (m.type !== type) return;
        child.off('message', listener);
        resolve(m as T);
      };
      child.on('message', listener);
    });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the app exited (${code}) before it was ready`)));
    void message<{ url?: string }>('ready').then(({ url }) => resolve({ child, url, message }));
  });
}

const killed = (child: ChildProcess): Promise<void> =>
  new Promise((done) => {
    if (child.exitCode !== null || child.signalCode !== null) return done();
    child.once('exit', () => done());
    child.kill('SIGKILL');
  });

interface Backend {
  env: Record<string, string>;
  store: DurableStore;
  ledgerCount(transactionId: string): Promise<number>;
}

function suite(
  name: 'PostgreSQL' | 'Redis',
  open: () => Promise<Backend>,
  cleanup: () => Promise<void>,
): void {
  describeWithService(name, `ipn.drain() after a SIGKILL (${name})`, () => {
    const apps: ChildProcess[] = [];
    let backend: Backend;
    beforeAll(async () => {
      backend = await open();
    });
    afterAll(async () => {
      await Promise.all(apps.map(killed));
      await cleanup();
    });

    /** Starts `drainers` drain apps, then a crash app that answers 200 and is killed inside its listener. */
    async function crashAfter200(drainers: number) {
      const { env, store } = backend;
      const drains = await Promise.all(
        Array.from({ length: drainers }, () => startApp({ ...env, ROLE: 'drain' })),
      );
      apps.push(...drains.map((app) => app.child));
      const crash = await startApp({ ...env, ROLE: 'crash' });
      apps.push(crash.child);
      const payment = uniquePayload();
      const id = String(payment.transaction_id);
      const started = crash.message<{ id: string }>('started');
      const response = await fetch(crash.url as string, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payment),
      });
      expect(response.status).toBe(200);
      expect((await started).id).toBe(id);
      await killed(crash.child);
      // The crashed attempt's lease runs out (polled, not slept): then the entry is due for anyone.
      const key = `${id}:SUCCESSFUL`;
      for (;;) {
        const entry = await store.get(key);
        expect(entry?.status).toBe('received');
        if (entry?.leaseUntil == null || entry.leaseUntil.getTime() < Date.now()) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      return { drains, id, key, store };
    }

    const drain = (app: App) => {
      const drained = app.message<{ counts: Record<string, number> }>('drained');
      app.child.send('drain');
      return drained.then(({ counts }) => counts);
    };

    test('a process killed after its 200, in its listener: one drain() of another process delivers it once', async () => {
      const { drains, id, key, store } = await crashAfter200(1);
      const [app] = drains as [App];
      expect(await drain(app)).toEqual({ delivered: 1, retried: 0, dead: 0, swept: 0, left: 0 });
      expect((await store.get(key))?.status).toBe('delivered');
      expect(await backend.ledgerCount(id)).toBe(1);
      // A second drain finds nothing due: still one row.
      expect(await drain(app)).toEqual({ delivered: 0, retried: 0, dead: 0, swept: 0, left: 0 });
      expect(await backend.ledgerCount(id)).toBe(1);
    });

    test('two processes calling drain() at once on one store: delivered once, by one of them', async () => {
      const { drains, id, key, store } = await crashAfter200(2);
      const counts = await Promise.all(drains.map(drain));
      expect(counts.map((c) => c.delivered).sort()).toEqual([0, 1]);
      expect((await store.get(key))?.status).toBe('delivered');
      expect(await backend.ledgerCount(id)).toBe(1);
    });
  });
}

const suffix = `${process.pid}_${Date.now() % 100_000}`;

{
  const table = `ipn_drain_${suffix}`;
  const ledger = `ledger_drain_${suffix}`;
  let pool: Pool | undefined;
  suite(
    'PostgreSQL',
    async () => {
      const p = (pool = new Pool({ connectionString: databaseUrl(), max: 2 }));
      const store = new PostgresStore({ pool: p, table });
      await store.migrate();
      // No unique constraint: a second delivery would be a second row.
      await p.query(`CREATE TABLE ${ledger} (transaction_id text NOT NULL)`);
      return {
        env: { STORE: 'postgres', NAMESPACE: table, LEDGER: ledger },
        store,
        ledgerCount: async (id) => {
          const { rows } = await p.query(
            `SELECT count(*)::int AS n FROM ${ledger} WHERE transaction_id = $1`,
            [id],
          );
          return rows[0].n as number;
        },
      };
    },
    async () => {
      if (!pool) return;
      await pool.query(`DROP TABLE IF EXISTS ${table}, ${ledger}`);
      await pool.end();
    },
  );
}

{
  const prefix = `ipn-drain-${suffix}:`;
  const ledger = `${prefix}ledger`;
  let client: Redis | undefined;
  suite(
    'Redis',
    async () => {
      const c = (client = new Redis(redisUrl()));
      await c.ping();
      return {
        env: { STORE: 'redis', NAMESPACE: prefix, LEDGER: ledger },
        store: new RedisStore({ client: c, prefix }),
        ledgerCount: async (id) => (await c.lrange(ledger, 0, -1)).filter((item) => item === id).length,
      };
    },
    async () => {
      if (!client) return;
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
      client.disconnect();
    },
  );
}
