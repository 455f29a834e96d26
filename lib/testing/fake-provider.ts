import { setMaxListeners } from 'node:events';
import {
  deliverTransaction,
  emptyReport,
  pause,
  postJson,
  type DeliveryReport,
} from './fake-provider-delivery.js';
import type { InitiateOptions, ForgeOptions } from './fake-provider-initiate.js';
import { checkForge, checkInitiate } from './fake-provider-initiate.js';
import { describe, resolveFakeProviderOptions, type FakeProviderInit } from './fake-provider-options.js';
import type { FakeTransaction } from './fake-provider-record.js';
import { ipnForm, newTransaction } from './fake-provider-record.js';
import { startStatusServer } from './fake-provider-server.js';
import { createStatusDesk } from './fake-provider-status.js';

/**
 * Counts of what the provider did, for assertions.
 * @inline
 */
export interface FakeProviderStats {
  /** Status queries received, blocked ones included. */
  statusQueries: number;
  /** Status queries answered 429 because the caller was blocked. */
  statusQueriesBlocked: number;
  /** Notifications POSTed to IPN addresses: every copy, resend, duplicate and forgery. */
  notificationsSent: number;
  /** How many times the IPN endpoints answered each HTTP status (network errors are not answers). */
  answers: Record<number, number>;
}

/**
 * A transaction `initiate()` started.
 * @inline
 */
export interface InitiatedTransaction {
  /** The id the service gave it, such as `FKP.000001`. */
  transactionId: string;
  /** Resolves once its delivery ended: acknowledged, resends exhausted, or the provider closed. Never rejects. */
  delivered: Promise<DeliveryReport>;
}

/** A fake payment service listening on 127.0.0.1: see {@link createFakeProvider}. */
export interface FakeProvider {
  /** Base address, `http://127.0.0.1:PORT`. */
  readonly url: string;
  /** What a status client takes as its base URL: `http://127.0.0.1:PORT/api_v1/transaction`. */
  readonly statusBaseUrl: string;
  /** Counts so far (a snapshot). */
  readonly stats: FakeProviderStats;
  /** Starts a transaction: stored at once as `PENDING1`, final after `processingMs`, then notified. */
  initiate(options: InitiateOptions): InitiatedTransaction;
  /** POSTs one notification the service never sent; resolves the HTTP status answered (`0`: no answer). */
  forge(options: ForgeOptions): Promise<number>;
  /**
   * Sets a transaction's current state, as status queries see it (for instance back to `PENDING`). Set while
   * the transaction is processing, it stays: processing then does not make it final (the notification still
   * carries the outcome).
   */
  setState(transactionId: string, state: string): void;
  /** Blocks status queries (answered 429) until `unblock()`, or for `blockForMs`. */
  block(): void;
  /** Lifts a block; the `blockAfter` count starts again. */
  unblock(): void;
  /** Status queries that named this transaction id. */
  statusQueriesFor(transactionId: string): number;
  /** A copy of the stored transaction, or `undefined` when the provider has none of that id. */
  transaction(transactionId: string): FakeTransaction | undefined;
  /** Stops the server, pending deliveries and timers. Pending `delivered` promises resolve. */
  close(): Promise<void>;
}

/**
 * Starts a fake payment service on 127.0.0.1 for tests: it answers status queries at
 * `POST /api_v1/transaction/status` and POSTs notifications (IPN) to your endpoint, with resends,
 * concurrent and duplicate copies, out-of-order states, forgeries and blocking, in the real service's
 * shapes. Close it in `afterEach`/`afterAll`: it leaves no timer or socket behind.
 *
 * @throws TypeError when `apiKey` is missing or an option is invalid.
 * @example
 * import { createFakeProvider } from 'ipn-kit/testing';
 *
 * const provider = await createFakeProvider({ apiKey: 'test-key', resendIntervalMs: 10 });
 * const tx = provider.initiate({
 *   amount: 5000,
 *   ipnUrl: `${appUrl}/ipn`,
 *   customData: 'order-1',
 *   outcome: 'SUCCESSFUL',
 *   duplicates: 2, // the service resends: your handler must credit once
 * });
 * expect(await tx.delivered).toMatchObject({ acknowledged: true, attempts: 3 });
 * expect(credits('order-1')).toBe(1);
 * await provider.close();
 */
export async function createFakeProvider(options: FakeProviderInit): Promise<FakeProvider> {
  const settings = resolveFakeProviderOptions(options);
  const transactions = new Map<string, FakeTransaction>();
  const setByHand = new Set<string>();
  const stop = new AbortController();
  // Each transaction in flight listens to `stop` while it waits or posts, and stops listening when done:
  // twenty at once are twenty listeners, not a leak, and Node's warning past ten would say otherwise.
  setMaxListeners(0, stop.signal);
  const tasks = new Set<Promise<unknown>>();
  const stats = { notificationsSent: 0, answers: {} as Record<number, number> };
  const sequences = { initiated: 0, forged: 0 };
  /** The key each transaction was created under: the service answers "not found" to any other. */
  const keyOf = new Map<string, string>();
  const desk = createStatusDesk({
    ...settings,
    find: (id, key) => (keyOf.get(id) === key ? transactions.get(id) : undefined),
  });
  let closing: Promise<void> | undefined;

  const onAnswer = (status: number): void => {
    stats.notificationsSent += 1;
    if (status !== 0) stats.answers[status] = (stats.answers[status] ?? 0) + 1;
  };
  const track = <T>(task: Promise<T>): Promise<T> => {
    tasks.add(task);
    void task.finally(() => tasks.delete(task));
    return task;
  };
  const nextId = (prefix: string, key: keyof typeof sequences): string => {
    let id: string;
    do {
      sequences[key] += 1;
      id = `${prefix}.${String(sequences[key]).padStart(6, '0')}`;
    } while (transactions.has(id));
    return id;
  };

  /** The key of `account`: the default account's `apiKey` when none is named. */
  function accountKey(account: string | undefined): string {
    if (account === undefined) return settings.apiKey;
    const key =
      settings.apiKeys !== undefined && Object.hasOwn(settings.apiKeys, account)
        ? settings.apiKeys[account]
        : undefined;
    if (key === undefined) {
      const known = Object.keys(settings.apiKeys ?? {}).join(', ') || 'none: pass apiKeys';
      throw new TypeError(`initiate: unknown account ${describe(account)} (known: ${known})`);
    }
    return key;
  }

  async function run(transaction: FakeTransaction, plan: InitiateOptions, url: string) {
    if (!(await pause(settings.processingMs, stop.signal))) return emptyReport();
    // A state set by hand while processing wins: the test asked for it.
    if (!setByHand.has(transaction.transactionId)) transaction.state = transaction.outcome;
    transaction.updatedAt = new Date();
    if (plan.deliver === false) return emptyReport();
    return deliverTransaction(transaction, plan, { ...settings, url, signal: stop.signal, onAnswer });
  }

  const server = await startStatusServer({
    ...settings,
    desk,
    signal: stop.signal,
    track: (task) => void track(task),
  });
  const { url } = server;

  return {
    url,
    statusBaseUrl: `${url}/api_v1/transaction`,
    get stats() {
      return {
        statusQueries: desk.queries,
        statusQueriesBlocked: desk.blocked,
        notificationsSent: stats.notificationsSent,
        answers: { ...stats.answers },
      };
    },
    initiate(plan) {
      if (stop.signal.aborted)
        throw new TypeError(
          'initiate: the fake provider is closed: create a new one with createFakeProvider()',
        );
      const ipnUrl = checkInitiate(plan, (id) => transactions.has(id));
      const key = accountKey(plan.account);
      const transactionId = plan.transactionId ?? nextId('FKP', 'initiated');
      const transaction = newTransaction({ ...plan, transactionId });
      transactions.set(transactionId, transaction);
      keyOf.set(transactionId, key);
      const delivered = track(run(transaction, plan, ipnUrl).catch(emptyReport));
      return { transactionId, delivered };
    },
    async forge(forgery) {
      const target = checkForge(forgery);
      const { ipnUrl, transactionId, state, customData, amount, ...fields } = forgery;
      const known = transactionId === undefined ? undefined : transactions.get(transactionId);
      // A real id keeps its stored fields, with the altered ones; any other id is a fresh record.
      const transaction = known
        ? { ...known, amount: amount ?? known.amount, customData: customData ?? known.customData }
        : newTransaction({
            transactionId: transactionId ?? nextId('FRG', 'forged'),
            amount: amount ?? 5000,
            customData: customData ?? '',
            outcome: 'SUCCESSFUL',
          });
      const body = JSON.stringify({ ...ipnForm(transaction, state ?? 'SUCCESSFUL'), ...fields });
      const { status } = await track(postJson(target, body, { ...settings, signal: stop.signal }));
      onAnswer(status);
      return status;
    },
    setState(transactionId, state) {
      const transaction = transactions.get(transactionId);
      if (transaction === undefined) {
        throw new TypeError(`setState: no transaction ${transactionId} was initiated by this provider`);
      }
      if (typeof state !== 'string' || state === '') {
        throw new TypeError(
          `setState: state must be a non-empty string such as 'PENDING' (got ${describe(state)})`,
        );
      }
      transaction.state = state;
      transaction.updatedAt = new Date();
      setByHand.add(transactionId);
    },
    block: () => desk.block(),
    unblock: () => desk.unblock(),
    statusQueriesFor: (transactionId) => desk.queriesFor(transactionId),
    transaction(transactionId) {
      const transaction = transactions.get(transactionId);
      if (transaction === undefined) return undefined;
      return {
        ...transaction,
        createdAt: new Date(transaction.createdAt),
        updatedAt: new Date(transaction.updatedAt),
      };
    },
    close() {
      closing ??= (async () => {
        stop.abort();
        await server.close();
        await Promise.allSettled([...tasks]);
      })();
      return closing;
    },
  };
}
