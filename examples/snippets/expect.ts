import { createStatusClient, ipnRouter } from 'ipn-kit';
import { RedisStore } from 'ipn-kit/redis';

// #region expect
const ipn = ipnRouter({
  store: new RedisStore({ client: redis }), // or PostgresStore: expectations survive a restart
  statusClient: createStatusClient({ baseUrl, apiKey }), // asked only for notifications that never came
});
ipn.on('successful', (n) => credit(n.custom_data, n.amount));
ipn.on('rejected', (event) => alertSomeone(event.message)); // a forged copy, no status query made
ipn.on('stale', (event) => alertSomeone(event.message)); // no outcome after reconcileAttempts queries

// When the customer starts paying, right after the initiation request answered:
export async function paymentStarted(transactionId: string): Promise<void> {
  await ipn.expect(transactionId, { amount: 5000, customData: 'order-42' });
}
// #endregion expect

declare const redis: ConstructorParameters<typeof RedisStore>[0]['client'];
declare const baseUrl: string;
declare const apiKey: string;
declare function credit(orderId: string, amount: number | null): void;
declare function alertSomeone(message: string): void;
export { ipn };
