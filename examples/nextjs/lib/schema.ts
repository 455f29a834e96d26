import { numeric, pgTable, text } from 'drizzle-orm/pg-core';

// Your ledger, in your Drizzle schema: no unique key needed, ipn-kit credits each notification once.
export const ledger = pgTable('ledger', {
  transactionId: text('transaction_id').notNull(),
  orderId: text('order_id').notNull(),
  amount: numeric('amount'),
});
