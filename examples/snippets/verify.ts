import { ipnRouter, type StatusSource } from 'ipn-kit';
import { alert, credit } from './context.js';

/** A router that confirms each notification with the service before emitting it. */
export function verifiedRouter(client: StatusSource) {
  // #region verify
  const ipn = ipnRouter({ verify: client });
  ipn.on('successful', (n) => credit(n.custom_data, n.amount)); // confirmed by the service
  ipn.on('rejected', ({ reason, mismatches, notification }) => alert(reason, mismatches, notification));
  // #endregion verify
  return ipn;
}

/** Delivers a notification that never arrived, if the service says it ended. */
export async function reconcileOne(ipn: ReturnType<typeof verifiedRouter>) {
  // #region reconcile
  const { record, emitted } = await ipn.reconcile('PIX_22827809');
  // #endregion reconcile
  return { record, emitted };
}
