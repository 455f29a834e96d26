import successful from '../test/fixtures/ipn-successful.json';

/** Stands for the transaction id in the body template; never found in a real field. */
const ID = '\u0000id\u0000';

/**
 * A SUCCESSFUL notification with every field of the interface, like test/fixtures/ipn-successful.json, with a
 * partner-sized `custom_data` (an order, a customer and a cart reference) that brings it to about 600 bytes.
 * Returned as a function of the transaction id: the JSON is built once, and each request only splices its id.
 */
export function bodyFor(): (transactionId: string) => string {
  const record = {
    ...successful,
    transaction_id: ID,
    customer_name: 'Awa Kone Traore',
    custom_data: JSON.stringify({
      orderId: 'order-2026-11-000184',
      customerId: 'cus_7Hq2LmX9',
      cart: 'sku-1042x2,sku-2210x1',
    }),
  };
  const [before, after] = JSON.stringify(record).split(JSON.stringify(ID).slice(1, -1)) as [string, string];
  return (transactionId) => before + transactionId + after;
}
