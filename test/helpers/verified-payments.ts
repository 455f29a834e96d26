import {
  createStatusClient,
  ipnRouter,
  type IpnRouter,
  type MemoryStore,
  type Options,
  type StatusClient,
} from 'ipn-kit';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { SETTLED_ATTEMPTS } from '../../lib/delivery/expectations.js';
import { quiet } from './quiet-logger.js';
import { recordEvents } from './record-events.js';
import { listen, settle, type Running } from './servers.js';
import { until } from './until.js';

// The setup shared by the tests of expectations checked through verification (the fake payment service's
// transactions, its status client, a verification held until the test opens it, a router that never sweeps
// by itself).

/** sweepIntervalMs for a router whose sweep runs only when a test calls ipn.sweep(). */
export const NO_SWEEP = 2 ** 31 - 1;

/**
 * A transaction of `provider` (100, custom_data 'order-a', SUCCESSFUL unless told), not delivered by the
 * service; resolves its id once the service has processed it.
 */
export async function paid(
  provider: FakeProvider,
  plan: { customData?: string; outcome?: 'SUCCESSFUL' | 'FAILED' } = {},
): Promise<string> {
  const outcome = plan.outcome ?? 'SUCCESSFUL';
  const { transactionId: id } = provider.initiate({
    amount: 100,
    ipnUrl: 'http://127.0.0.1:9/unused',
    customData: plan.customData ?? 'order-a',
    outcome,
    deliver: false,
  });
  await until(() => provider.transaction(id)?.state === outcome, 'processing');
  return id;
}

/** The fake service's status client (api key 'k'), quiet. */
export const statusClientOf = (provider: FakeProvider): StatusClient =>
  createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: 'k', logger: quiet });

/** Whether `store` holds the expectation of `id` settled. */
export const settledIn = (store: MemoryStore, id: string): boolean =>
  (store.expectations.get(id)?.attempts ?? 0) >= SETTLED_ATTEMPTS;

/** A promise `gate` that resolves once `open()` is called. */
export function latch() {
  let open = (): void => {};
  const gate = new Promise<void>((resolve) => (open = resolve));
  return { gate, open };
}

type GetStatus = StatusClient['getStatus'];

/** A status query that fails as one the service did not answer in time. */
export const timedOut = (): never => {
  throw new Error('the service did not answer in time');
};

/**
 * A `verify` whose queries wait until `open()`, then answer as `answer` does (by default the client's
 * answer). A query `holds` does not hold is answered by the client at once.
 */
export function gatedVerify(
  client: { getStatus: GetStatus },
  options: {
    answer?: (...args: Parameters<GetStatus>) => ReturnType<GetStatus>;
    holds?: (id: string) => boolean;
  } = {},
) {
  const { gate, open } = latch();
  const answer = options.answer ?? ((...args: Parameters<GetStatus>) => client.getStatus(...args));
  const verify = {
    getStatus: async (...args: Parameters<GetStatus>) => {
      if (options.holds !== undefined && !options.holds(args[0])) return client.getStatus(...args);
      await gate;
      return answer(...args);
    },
  };
  return { verify, open };
}

/** A router with the quiet logger and no sweep of its own, then `options`. */
export const quietRouter = (options: Partial<Options> & Pick<Options, 'store'>) =>
  ipnRouter({ logger: quiet, sweepIntervalMs: NO_SWEEP, ...options });

/**
 * Counts the reads of `id`'s expectation in `store` (`reads`); a read `fails(read)` says fails, as a store
 * that is down does.
 */
export function watchedReads(store: MemoryStore, id: string, fails: (read: number) => boolean = () => false) {
  const get = store.expectations.get.bind(store.expectations);
  const watched = { reads: 0 };
  store.expectations.get = (transactionId) => {
    if (transactionId === id && fails((watched.reads += 1))) throw new Error('the store is down');
    return get(transactionId);
  };
  return watched;
}

/** What a test of this file's session holds: the fake service, and the router and server it left running. */
export interface Session {
  provider: FakeProvider;
  ipn: IpnRouter | undefined;
  running: Running | undefined;
  /** The unhandled rejections during the test (with `{ unhandled: true }`). */
  unhandled: unknown[];
  /** Serves `router` (as `ipn` and `running`, closed after the test); its recorder, and the url to post to. */
  serve<R extends IpnRouter>(
    router: R,
  ): Promise<{ ipn: R; recorder: ReturnType<typeof recordEvents>; url: string }>;
}

/**
 * For one test file: a fake payment service (api key 'k') before each test; after each, the server and the
 * router the test left in `running` and `ipn` closed, then the service. With `unhandled`, the unhandled
 * rejections during each test are collected.
 */
export function perTestService(options: { unhandled?: boolean } = {}): Session {
  const onUnhandled = (reason: unknown) => void session.unhandled.push(reason);
  const session: Session = {
    provider: undefined as unknown as FakeProvider,
    ipn: undefined,
    running: undefined,
    unhandled: [],
    async serve(router) {
      session.ipn = router;
      const recorder = recordEvents(router);
      session.running = await listen(router);
      return { ipn: router, recorder, url: `${session.running.url}/` };
    },
  };
  beforeEach(async () => {
    session.provider = await createFakeProvider({ apiKey: 'k' });
    session.unhandled = [];
    if (options.unhandled === true) process.on('unhandledRejection', onUnhandled);
  });
  afterEach(async () => {
    if (options.unhandled === true) process.off('unhandledRejection', onUnhandled);
    await session.running?.close();
    session.running = undefined;
    await session.ipn?.close();
    session.ipn = undefined;
    await session.provider.close();
  });
  return session;
}

/** Resolves once `recorder` has seen a `name` event (`what` in the timeout's message), and the work after it settled. */
export async function untilFirst(
  recorder: ReturnType<typeof recordEvents>,
  name: Parameters<ReturnType<typeof recordEvents>['count']>[0],
  what: string,
  timeoutMs?: number,
): Promise<void> {
  await until(() => recorder.count(name) > 0, what, timeoutMs);
  await settle();
}

/**
 * A router whose verification (`verify`) gives up after two attempts, leaving the payment to the sweep,
 * which asks `statusClient` and takes an expectation as due at once.
 */
export const givingUpRouter = (
  store: MemoryStore,
  verify: Options['verify'],
  statusClient: Options['statusClient'],
) =>
  quietRouter({ store, verify, statusClient, verifyAttempts: 2, verifyRetryDelayMs: 5, reconcileAfterMs: 1 });

/**
 * The steps of the tests that forge notifications of the per-test service `t`'s transactions: its status
 * client, a transaction left pending, the service's own notification, and the router's own work run now.
 */
export function forgedPayments(t: Session) {
  return {
    /** A status client of the fake service that may ask one transaction again after `minIntervalMs`. */
    clientOf: (minIntervalMs = 10): StatusClient =>
      createStatusClient({ baseUrl: t.provider.statusBaseUrl, apiKey: 'k', minIntervalMs, logger: quiet }),

    /** A transaction of the fake service the customer has not paid yet: its status query answers PENDING. */
    pending(customData = 'order-1', amount = 5000): string {
      const { transactionId } = t.provider.initiate({
        amount,
        ipnUrl: 'http://127.0.0.1:9/unused',
        customData,
        outcome: 'SUCCESSFUL',
        deliver: false,
      });
      t.provider.setState(transactionId, 'PENDING'); // set while processing: it stays, until the test pays it
      return transactionId;
    },

    /** POSTs the service's genuine notification of `id` (its stored record); resolves the answer's status. */
    genuine: (url: string, id: string, state = 'SUCCESSFUL'): Promise<number> =>
      t.provider.forge({ ipnUrl: url, transactionId: id, state }),

    drained,
  };
}

/** Everything `ipn` does by itself, now: recovery, retries, one sweep pass. */
export async function drained(ipn: IpnRouter): Promise<void> {
  await ipn.drain({ budgetMs: 1_000 });
  await settle();
}
