import { ipnRouter, type DurableStore, type Options } from '../../lib/index.js';
import { quiet } from './quiet-logger.js';

/**
 * An at-least-once router over `store` whose ledger refuses a notification whose `custom_data` says
 * `refuse` (so that it ends dead after one attempt) and credits the others: the retention tests' app.
 */
export function refusingRouter(store: DurableStore, options: Partial<Options> = {}) {
  const ipn = ipnRouter({ store, delivery: 'at-least-once', maxAttempts: 1, logger: quiet, ...options });
  ipn.on('successful', (n) => {
    if (String(n.custom_data).includes('refuse')) throw new Error('the ledger refuses it');
  });
  ipn.on('error', () => {});
  ipn.on('dead', () => {});
  return ipn;
}

/** Posts `payload` to `ipn` through its fetch handler; resolves the status. */
export async function postTo(
  ipn: { fetch(request: Request): Promise<Response> },
  payload: Record<string, unknown>,
) {
  const request = new Request('http://127.0.0.1/ipn', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(payload),
  });
  return (await ipn.fetch(request)).status;
}
