import { createStatusClient, ipnRouter } from 'ipn-kit';

// One router per server process. In a serverless function MemoryStore dedupes within one instance only:
// give it a RedisStore or PostgresStore there (see docs/stores-and-delivery.md).
export const ipn = ipnRouter({
  verify: createStatusClient({
    baseUrl: process.env.PAYMENT_STATUS_URL ?? 'https://payments.example/api_v1/transaction',
    apiKey: process.env.PAYMENT_API_KEY ?? '',
  }),
});

// A log line only. To credit, look the order up from custom_data and credit it only if this transaction_id
// and amount are the ones you initiated it with, and only once: lib/ledger-ipn.ts does it in SQL.
ipn.on('successful', (n) => console.log(`credit ${n.custom_data}: ${n.amount} (${n.transaction_id})`));
ipn.on('failed', (n) => console.log(`failed ${n.custom_data}: ${n.error}`));
ipn.on('rejected', (e) => console.log(`rejected ${e.notification.custom_data}: ${e.reason}`));
ipn.on('conflict', (e) => console.log(`conflict ${e.notification.custom_data}: paid already`));
ipn.on('invalid', (e) => console.log(`invalid ${e.status} ${e.reason}`));
ipn.on('error', ({ error }) => console.error(`error ${error.message}`));
