import { z } from 'zod';
import { ipnRouter } from 'ipn-kit';
import { credit, flagForReview } from './context.js';

/** A router whose notifications carry a typed `customData`, as the notification page shows. */
export const ipn = ipnRouter({
  customData: z.object({ orderId: z.string() }),
  logger: { debug() {}, info() {}, warn() {}, error() {} },
});

// #region listener
ipn.on('successful', (n) => {
  if (n.customDataError) return flagForReview(n); // the payment happened: never drop it
  credit(n.customData.orderId, n.amount);
});
// #endregion listener
