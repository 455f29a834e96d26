/**
 * Express + Mongoose (docs/recipes.md, "Express and Mongoose"): the models and the listener. The listener
 * takes the models as an argument, so test/integration/express-mongoose.test.ts runs it, under ipn-kit's
 * at-least-once delivery, against an in-memory stand-in of these two collections.
 */
// #region mongoose-models
import { Schema, model } from 'mongoose';
import type { IpnNotification } from 'ipn-kit';

// One document per payment: the unique index on transactionId is what makes the credit idempotent.
const paymentSchema = new Schema({
  transactionId: { type: String, required: true },
  orderId: { type: String, required: true },
  amount: { type: Number, required: true },
});
paymentSchema.index({ transactionId: 1 }, { unique: true });
export const Payment = model('Payment', paymentSchema);

const orderSchema = new Schema({
  _id: String,
  status: { type: String, enum: ['pending', 'paid'], default: 'pending' },
  paidBy: String,
});
export const Order = model('Order', orderSchema);
// #endregion mongoose-models

// #region mongoose-listener
/** The two writes of a credit, each safe to run again. */
export interface PaymentModels {
  Payment: { create(doc: { transactionId: string; orderId: string; amount: number }): Promise<unknown> };
  Order: {
    updateOne(
      filter: { _id: string; status: 'pending' },
      update: { $set: { status: 'paid'; paidBy: string } },
    ): PromiseLike<unknown>;
  };
}

/** MongoDB's duplicate key error: E11000, code 11000 (thrown as a MongoServerError). */
const isDuplicateKey = (error: unknown) =>
  typeof error === 'object' && error !== null && (error as { code?: unknown }).code === 11000;

/**
 * Credits one payment. ipn-kit calls it again after a failure or a crash, so each write must complete the
 * job when run again: a duplicate payment means "already recorded", and the order is still marked paid.
 */
export async function creditPayment(models: PaymentModels, n: IpnNotification): Promise<void> {
  const orderId = String(n.custom_data);
  try {
    await models.Payment.create({ transactionId: n.transaction_id, orderId, amount: n.amount ?? 0 });
  } catch (error) {
    if (!isDuplicateKey(error)) throw error; // a real failure: the attempt fails, ipn-kit retries it
    // Already recorded by an earlier attempt. Do not return here: that attempt may have died before the
    // order's update below, and this is the retry that must finish it.
  }
  // Matches nothing once the order is paid: running it again changes nothing.
  await models.Order.updateOne(
    { _id: orderId, status: 'pending' },
    { $set: { status: 'paid', paidBy: n.transaction_id } },
  );
}
// #endregion mongoose-listener
