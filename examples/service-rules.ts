import type { AddressInfo } from 'node:net';
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { createStatusClient, ipnRouter, MemoryStore, type IpnRouter } from 'ipn-kit';
import { createFakeProvider } from 'ipn-kit/testing';

/** One order of the second scene, and how it ended. */
export interface RulesOrder {
  orderId: string;
  transactionId: string;
  amount: number;
  /** What happened to its notification. */
  scene: 'SUCCESS notification' | 'forged copy' | 'notification lost';
  credits: number;
  /** How it was credited (or not): by its notification, by the sweep, or rejected. */
  outcome: string;
}

/** What the second scene ends with. */
export interface RulesSummary {
  orders: RulesOrder[];
  /** Rejected notifications, by their expectation: no status query was needed. */
  rejected: number;
  /** Status queries the service received before the sweep ran: 0 (no notification is verified by query). */
  queriesBeforeSweep: number;
  /** Status queries in all: one, for the lost notification. */
  statusQueries: number;
  /** Transactions the sweep reconciled. */
  reconciled: number;
}

const API_KEY = 'demo-api-key';

/**
 * The service's own documentation, played: notifications written `"state": "SUCCESS"` with `reponse`, the
 * status query kept for notifications that never arrived. The shop calls `ipn.expect()` when a payment
 * starts; a forged copy with another amount is rejected by its expectation (no status query), and a
 * notification that never comes is reconciled by the sweep after `reconcileAfterMs` (shortened here).
 *
 * @example
 * const { orders, statusQueries } = await runServiceRules();
 */
export async function runServiceRules(): Promise<RulesSummary> {
  const provider = await createFakeProvider({
    apiKey: API_KEY,
    resendIntervalMs: 20,
    successState: 'SUCCESS',
    responseField: 'reponse',
  });
  const statusClient = createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: API_KEY });
  // #region expect
  const ipn: IpnRouter = ipnRouter({
    store: new MemoryStore(),
    statusClient, // for the sweep only: no notification is verified by a status query
    reconcileAfterMs: 300, // 15 minutes (the default) in production; shortened for the demo
    sweepIntervalMs: 100,
  });
  // #endregion expect
  const credits = new Map<string, number>();
  const outcomes = new Map<string, string>();
  let rejected = 0;
  ipn.on('successful', (n) => {
    credits.set(n.custom_data, (credits.get(n.custom_data) ?? 0) + 1);
    outcomes.set(n.custom_data, `credited (state received: ${n.rawState ?? n.state})`);
  });
  ipn.on('rejected', (event) => {
    rejected += 1;
    outcomes.set(event.notification.custom_data, `forgery rejected (${event.mismatches.join(', ')})`);
  });

  const server = createServer(ipn);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const ipnUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/ipn`;
  const orders: RulesOrder[] = [
    { orderId: 'order-2001', transactionId: 'EFB.004217', amount: 1000, scene: 'SUCCESS notification' },
    { orderId: 'order-2002', transactionId: 'EFB.004218', amount: 7500, scene: 'forged copy' },
    { orderId: 'order-2003', transactionId: 'PIX_22827820', amount: 3000, scene: 'notification lost' },
  ].map((order) => ({ ...order, credits: 0, outcome: 'pending' }) as RulesOrder);
  try {
    for (const order of orders) {
      // When the payment starts: what the shop expects, kept in the store.
      await ipn.expect(order.transactionId, { amount: order.amount, customData: order.orderId });
    }
    const [paid, forged, lost] = orders as [RulesOrder, RulesOrder, RulesOrder];
    await provider.initiate({ ...plan(paid), ipnUrl }).delivered;
    // The forgery arrives first, with the real transaction id and another amount.
    await provider.forge({
      ipnUrl,
      transactionId: forged.transactionId,
      amount: 750_000,
      customData: forged.orderId,
    });
    await provider.initiate({ ...plan(forged), ipnUrl, deliver: false }).delivered;
    const queriesBeforeSweep = provider.stats.statusQueries;
    // The forged order's genuine notification and the lost one never arrive: the sweep asks the service.
    await provider.initiate({ ...plan(lost), ipnUrl, deliver: false }).delivered;
    for (let wait = 0; wait < 300 && (credits.get(lost.orderId) ?? 0) === 0; wait += 1) await sleep(10);
    for (let wait = 0; wait < 300 && (credits.get(forged.orderId) ?? 0) === 0; wait += 1) await sleep(10);
    for (const order of orders) {
      order.credits = credits.get(order.orderId) ?? 0;
      order.outcome = outcomes.get(order.orderId) ?? 'pending';
    }
    lost.outcome = lost.credits > 0 ? 'credited by the sweep (status query)' : lost.outcome;
    if (forged.credits > 0) forged.outcome = 'forgery rejected; genuine payment credited by the sweep';
    return {
      orders,
      rejected,
      queriesBeforeSweep,
      statusQueries: provider.stats.statusQueries,
      reconciled: orders.filter((order) => order.outcome.includes('sweep')).length,
    };
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await ipn.close();
    await provider.close();
  }
}

const plan = (order: RulesOrder) =>
  ({
    transactionId: order.transactionId,
    amount: order.amount,
    customData: order.orderId,
    outcome: 'SUCCESSFUL',
  }) as const;

/** The second scene as plain text for a terminal. */
export function formatRules(summary: RulesSummary): string {
  const rows = summary.orders.map(
    (o) =>
      `${o.orderId.padEnd(12)}${String(o.amount).padStart(6)}  ${o.scene.padEnd(22)}${o.credits}  ${o.outcome}`,
  );
  return [
    "The service's own rules: SUCCESS and reponse, expectations, the status query only for what never arrived",
    '',
    ...rows,
    '',
    `Rejected by their expectation: ${summary.rejected}, with ${summary.queriesBeforeSweep} status queries`,
    `Reconciled by the sweep: ${summary.reconciled}, with ${summary.statusQueries} status queries in all`,
  ].join('\n');
}
