import { createStatusClient, ipnRouter, MemoryStore, type Store } from 'ipn-kit';

/** The zones' keys, from your secrets (here, the fake service's in the test that runs this file). */
const keys = { xof: process.env.PAYMENT_KEY_XOF ?? 'key-xof', xaf: process.env.PAYMENT_KEY_XAF ?? 'key-xaf' };

export function zonedRouter(baseUrl: string, store: Store = new MemoryStore()) {
  // #region several-keys
  // import { createStatusClient, ipnRouter } from 'ipn-kit';
  const statusClient = createStatusClient({
    baseUrl, // https://host/api_v1/transaction
    apiKeys: { xof: keys.xof, xaf: keys.xaf }, // one key per currency zone, as the service issues them
  });
  const ipn = ipnRouter({
    store,
    verify: statusClient,
    // Optional: the zone of a notification with no expectation naming one (else each key in turn).
    accountOf: (n) => (n.service_id === 21 ? 'xaf' : 'xof'),
  });

  // At initiation, name the zone whose key created the transaction: the sweep and verification ask with it.
  async function startPayment(transactionId: string, zone: 'xof' | 'xaf', amount: number, orderId: string) {
    await ipn.expect(transactionId, { amount, customData: orderId, account: zone });
  }
  // #endregion several-keys
  return { ipn, statusClient, startPayment };
}
