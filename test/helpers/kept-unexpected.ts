import { randomUUID } from 'node:crypto';
import { createStatusClient, ipnRouter, type IpnRouter, type Options, type Store } from 'ipn-kit';
import { createFakeProvider, type FakeProvider } from 'ipn-kit/testing';
import { CLEANUP_TIMEOUT_MS } from './drop-inboxes.js';
import { quiet } from './quiet-logger.js';
import { recordEvents } from './record-events.js';
import { servedRouters } from './servers.js';
import { NO_SWEEP } from './verified-payments.js';

/** The status client of a kept-unexpected test: the service at `baseUrl` (api key 'test-key'). */
interface StatusSettings {
  baseUrl: string;
  minIntervalMs: number;
  blockCooldownMs?: number;
}

/**
 * An at-least-once router over `store`, quiet, that asks the service as `status` says, takes an expectation
 * as due after 10 ms and sweeps only when a test calls `sweep()`; then `options`.
 */
export function keptRouter(store: Store, status: StatusSettings, options: Partial<Options> = {}): IpnRouter {
  return ipnRouter({
    store,
    delivery: 'at-least-once',
    logger: quiet,
    statusClient: createStatusClient({ apiKey: 'test-key', ...status }),
    reconcileAfterMs: 10,
    sweepIntervalMs: NO_SWEEP,
    ...options,
  });
}

/** What a kept-unexpected test serves: the router, its events, and the url to post notifications to. */
export interface Kept {
  ipn: IpnRouter;
  events: ReturnType<typeof recordEvents>;
  url: string;
  /** POSTs `body` as JSON to the router. */
  post: (body: unknown) => Promise<Response>;
}

/**
 * For one describe block: `serve(ipn)` records `ipn`'s events and serves it (both closed after each test,
 * the server first).
 */
export function keptServer(): (ipn: IpnRouter) => Promise<Kept> {
  const serve = servedRouters();
  return async (ipn) => {
    const events = recordEvents(ipn);
    const served = await serve(ipn);
    return { ipn, events, url: `${served.url}/`, post: served.post };
  };
}

/**
 * For one describe block: the fake service (api key 'test-key', a notification resent 3 times, 30 ms apart),
 * made before its tests, unblocked after each test, closed after the block; and `serve` as `keptServer()`'s.
 */
export function resendingService(): { provider: FakeProvider; serve: (ipn: IpnRouter) => Promise<Kept> } {
  let provider: FakeProvider;
  beforeAll(async () => {
    provider = await createFakeProvider({ apiKey: 'test-key', resendIntervalMs: 30, resends: 3 });
  });
  afterEach(() => provider.unblock());
  afterAll(() => provider.close(), CLEANUP_TIMEOUT_MS);
  const serve = keptServer();
  return {
    get provider() {
      return provider;
    },
    serve,
  };
}

/** Expectations in use: the instance initiated a payment before (`order-0`, of another transaction). */
export const expectAnother = (ipn: IpnRouter): Promise<void> =>
  ipn.expect(`EXP.${randomUUID().slice(0, 8)}`, { amount: 1, customData: 'order-0' });
