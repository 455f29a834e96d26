import { numeric, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

// Your ledger, in your Drizzle schema: no unique key needed, ipn-kit credits each notification once.
export const ledger = pgTable('ledger', {
  transactionId: text('transaction_id').notNull(),
  orderId: text('order_id').notNull(),
  amount: numeric('amount'),
});

// Your orders, with what you initiated: the transaction_id the service returned, and the amount.
export const orders = pgTable('orders', {
  id: text('id').primaryKey(),
  transactionId: text('transaction_id').notNull(),
  amount: numeric('amount').notNull(),
  paidAt: timestamp('paid_at', { withTimezone: true }),
});
