import type { Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Express } from 'express';
import { createStatusClient } from 'ipn-kit';
import { createFakeProvider } from 'ipn-kit/testing';
import { runCrashRecovery } from './crash-recovery.js';
import { formatCrashRecovery } from './format-crash-recovery.js';
import { formatSummary } from './format-summary.js';
import { formatRules, runServiceRules } from './service-rules.js';
import { createPartnerApp, type IpnCounts, type Order } from './partner-app.js';
import { PAYMENTS, playPaymentService, type PlannedPayment, type ServiceReport } from './payment-service.js';

/** What the demo ends with: the partner's orders and counts, and what the service sent. */
export interface DemoSummary {
  orders: Order[];
  counts: IpnCounts;
  /** Notifications the partner could not match to an order: none expected. */
  review: string[];
  payments: readonly PlannedPayment[];
  service: ServiceReport;
  /** Status queries the service received: one per distinct notification, at most. */
  statusQueries: number;
}

const API_KEY = 'demo-api-key';

/**
 * Starts the partner's shop on a free loopback port, and ipn-kit's fake payment service beside it; creates
 * one order per planned payment, lets the service notify them (resends, concurrent resends, a FAILED then
 * SUCCESSFUL), then a forged notification and a malformed request; the shop verifies each notification with
 * the service's status query (a copy that comes meanwhile is answered 503, and the service resends it). Then
 * shuts down and returns what the shop ended with.
 *
 * @example
 * const { orders, counts } = await runDemo();
 */
export async function runDemo(payments: readonly PlannedPayment[] = PAYMENTS): Promise<DemoSummary> {
  // A copy that comes while its first copy is being verified is answered 503 and resent, every 20 ms here:
  // up to 50 times (a second), so a slow verification on a busy machine still ends with the copy's 200.
  const provider = await createFakeProvider({ apiKey: API_KEY, resendIntervalMs: 20, resends: 50 });
  // Short waits for a demo: the forged id is rejected once the service says "not found" twice, 200 ms apart.
  const client = createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: API_KEY, minIntervalMs: 200 });
  const partner = createPartnerApp({ verify: client, verifyRetryDelayMs: 100 });
  const server = await listen(partner.app);
  try {
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('the server has no TCP address');
    const base = `http://127.0.0.1:${address.port}`;
    // The shop's checkout: each order exists before the customer pays it.
    for (const { orderId, amount } of payments) {
      const response = await fetch(`${base}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ orderId, amount }),
      });
      if (response.status !== 201) throw new Error(`creating ${orderId} answered ${response.status}`);
    }
    const service = await playPaymentService(provider, `${base}/ipn`, payments);
    // Events follow each 200 once the status query confirms (or contradicts) the notification.
    const settled = () => partner.counts.received + partner.counts.rejected >= service.notifications + 1;
    for (let wait = 0; wait < 500 && !settled(); wait += 1) await sleep(10);
    return {
      orders: [...partner.orders.values()].map((order) => ({ ...order })),
      counts: { ...partner.counts },
      review: [...partner.review],
      payments,
      service,
      statusQueries: provider.stats.statusQueries,
    };
  } finally {
    await close(server);
    await partner.close();
    await provider.close();
  }
}

function listen(app: Express): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = app.listen(0, '127.0.0.1', (error?: Error) => (error ? reject(error) : resolve(server)));
  });
}

function close(server: Server): Promise<void> {
  return new Promise((resolve, reject) => {
    server.close((error) => (error ? reject(error) : resolve()));
    // fetch keeps connections alive; without this the process would wait for them to time out.
    server.closeAllConnections();
  });
}

/**
 * True when this file is the program being run (`npm start`), false when a test imports it. Compares the
 * script path rather than `require.main`, which does not exist when tsx runs the file as ESM.
 */
function isEntryPoint(): boolean {
  const script = process.argv[1];
  return script !== undefined && /(^|[\\/])examples[\\/]demo(\.[cm]?[jt]s)?$/.test(script);
}

if (isEntryPoint()) {
  runDemo()
    .then(async (summary) => {
      console.log(formatSummary(summary));
      console.log(`\n${formatRules(await runServiceRules())}`);
      const crash = await runCrashRecovery();
      console.log(`\n${formatCrashRecovery(crash)}`);
      // A second credit is the one outcome this scene exists to rule out: a failure, not a skip.
      if (!('skipped' in crash) && crash.ledger.length !== 1) process.exitCode = 1;
    })
    .then(
      () => {},
      (error: unknown) => {
        console.error('the demo failed:', error);
        process.exitCode = 1;
      },
    );
}
