// Run by test/runtimes/node-sqlite.test.ts with Deno or Bun (deno run / bun run node-sqlite-app.ts), with
// FILE (the SQLite file) and PORT: SqliteStore on the runtime's node:sqlite (DatabaseSync), ipn-kit from
// the packed tarball, served with Deno.serve or Bun.serve. /once is a plain store (at most once), any other
// path a durable inbox (at least once) whose listener credits a ledger through the delivery's db and fails
// its first attempt. Prints "listening on <url>" once it listens.
import { ipnRouter } from 'ipn-kit';
import { SqliteStore, type SqliteDatabase } from 'ipn-kit/sqlite';

// By a name TypeScript does not resolve: the project's types are Node 20's, which have no node:sqlite.
const nodeSqlite: string = 'node:sqlite';
const { DatabaseSync } = (await import(nodeSqlite)) as {
  DatabaseSync: new (path: string) => SqliteDatabase;
};

const file = process.env.FILE!;
const open = () => new DatabaseSync(file);
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

const durable = new SqliteStore({ database: open(), connect: open });
const once = new SqliteStore({ database: open(), connect: open, table: 'ipn_once' });
await durable.migrate();
await once.migrate();
// No unique key: a second credit of a payment would be a second row.
const ledger = open();
ledger.exec('PRAGMA busy_timeout = 5000');
ledger.exec('CREATE TABLE IF NOT EXISTS ledger (transaction_id TEXT NOT NULL, amount REAL, via TEXT)');

const atMostOnce = ipnRouter({ store: once, logger: quiet });
atMostOnce.on('successful', (n) => {
  ledger.prepare("INSERT INTO ledger VALUES (?, ?, 'once')").run(n.transaction_id, n.amount);
});

const atLeastOnce = ipnRouter({
  store: durable,
  delivery: 'at-least-once',
  logger: quiet,
  retryDelayMs: 20,
  recoveryIntervalMs: 50,
});
atLeastOnce.on('successful', (n, { db, attempt }) => {
  // db: the delivery transaction's DatabaseSync. This row commits with the delivered mark, or not at all.
  db.prepare("INSERT INTO ledger VALUES (?, ?, 'db')").run(n.transaction_id, n.amount);
  if (attempt === 1) throw new Error('the order service is down');
});

const port = Number(process.env.PORT ?? 0);
const handle = (req: Request) =>
  new URL(req.url).pathname === '/once' ? atMostOnce.fetch(req) : atLeastOnce.fetch(req);
if (typeof Deno !== 'undefined') {
  Deno.serve(
    {
      hostname: '127.0.0.1',
      port,
      onListen: (at) => console.log(`listening on http://127.0.0.1:${at.port}`),
    },
    handle,
  );
} else {
  const server = Bun.serve({ hostname: '127.0.0.1', port, fetch: handle });
  console.log(`listening on http://127.0.0.1:${server.port}`);
}

// The runtimes' globals, as far as this file uses them: the project type-checks against Node's types.
declare const Deno: {
  serve(
    options: { hostname: string; port: number; onListen(at: { port: number }): void },
    handler: (req: Request) => Promise<Response>,
  ): unknown;
};
declare const Bun: {
  serve(options: { hostname: string; port: number; fetch(req: Request): Promise<Response> }): {
    port: number;
  };
};
