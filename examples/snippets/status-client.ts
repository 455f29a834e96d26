// #region status-client
import { createStatusClient } from 'ipn-kit';

const client = createStatusClient({ baseUrl: 'https://api.example.com/api_v1/transaction', apiKey });
const record = await client.getStatus('PIX_22827809'); // POST {baseUrl}/status {api_key, transaction_ids}
// #endregion status-client

declare const apiKey: string;
export { record };
