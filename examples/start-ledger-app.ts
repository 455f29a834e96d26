import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

/** A running ledger app (`examples/ledger-app.ts` or `examples/sqlite-ledger-app.ts`), in a process of its own. */
export interface LedgerApp {
  /** Its IPN endpoint. */
  url: string;
  /** Resolves the next `written` message: its listener wrote a ledger row, in attempt `attempt`. */
  written(): Promise<{ attempt: number }>;
  /** Ends it with `signal`; resolves the signal it died of. */
  kill(signal: NodeJS.Signals): Promise<NodeJS.Signals | null>;
}

/** How a ledger app is configured: its environment, less what the scene fixes. */
export interface LedgerAppConfig {
  /** PostgreSQL (`examples/ledger-app.ts`) at this URL, or SQLite (`examples/sqlite-ledger-app.ts`) in this file. */
  database: { url: string } | { sqliteFile: string };
  inboxTable: string;
  ledgerTable: string;
  /** The partner's orders, each with the transaction_id and the amount it was initiated with. */
  ordersTable: string;
  leaseMs: number;
  /** Keep the first attempt open after its write, until the process is killed. */
  holdAfterWrite: boolean;
}

interface Message {
  type: string;
  url?: string;
  attempt?: number;
}

/** A process start costs a second or two on a busy machine; a silence this long means something broke. */
const SILENCE_MS = 15_000;

/**
 * Starts the ledger app of `config.database` with tsx and resolves once it listens. Adds the process to `running`
 * until it exits, so that the caller can end whatever is left.
 */
export async function startLedgerApp(
  config: LedgerAppConfig,
  running: Set<ChildProcess>,
): Promise<LedgerApp> {
  const { database } = config;
  const [script, where] =
    'url' in database
      ? ['ledger-app.ts', { DATABASE_URL: database.url }]
      : ['sqlite-ledger-app.ts', { SQLITE_FILE: database.sqliteFile }];
  const child = fork(join(__dirname, script), [], {
    cwd: join(__dirname, '..'), // where tsx finds tsconfig.json, which maps `ipn-kit` to lib/
    execArgv: ['--import', 'tsx'],
    env: {
      ...process.env,
      ...where,
      INBOX_TABLE: config.inboxTable,
      LEDGER_TABLE: config.ledgerTable,
      ORDERS_TABLE: config.ordersTable,
      LEASE_MS: String(config.leaseMs),
      HOLD_AFTER_WRITE: config.holdAfterWrite ? '1' : '0',
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  running.add(child);
  child.once('exit', () => running.delete(child));
  child.on('error', () => {}); // a failed kill of a child that died: its exit tells the rest
  // Every message is kept until asked for: the restarted app may write before its caller asks.
  const received: Message[] = [];
  child.on('message', (message: Message) => received.push(message));
  const next = (type: string) => take(child, received, type);
  const { url } = await next('ready');
  return {
    url: url ?? '',
    written: async () => ({ attempt: (await next('written')).attempt ?? 0 }),
    kill: (signal) => stopProcess(child, signal),
  };
}

/**
 * Removes and resolves the first message of `type` in `received`, waiting for it if need be; rejects if
 * `child` exits first, or stays silent too long.
 */
function take(child: ChildProcess, received: Message[], type: string): Promise<Message> {
  return new Promise((resolve, reject) => {
    const check = (): void => {
      const index = received.findIndex((message) => message.type === type);
      if (index < 0) return;
      const found = received.splice(index, 1)[0];
      if (found) done(found);
    };
    const onExit = () => done(new Error(`the ledger app exited before it sent '${type}'`));
    const timer = setTimeout(
      () => done(new Error(`the ledger app sent no '${type}' within ${SILENCE_MS} ms`)),
      SILENCE_MS,
    );
    function done(outcome: Message | Error) {
      clearTimeout(timer);
      child.off('message', check).off('exit', onExit);
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    }
    child.on('message', check).once('exit', onExit);
    check();
    if (child.exitCode !== null || child.signalCode !== null) onExit();
  });
}

/** Ends `child` with `signal` unless it is gone already; resolves the signal it died of. */
export function stopProcess(child: ChildProcess, signal: NodeJS.Signals): Promise<NodeJS.Signals | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.signalCode);
  return new Promise((resolve) => {
    child.once('exit', (_code, died) => resolve(died));
    child.kill(signal);
  });
}
