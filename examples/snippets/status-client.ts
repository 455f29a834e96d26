// #region status-client
import { createStatusClient } from 'ipn-kit';

const client = createStatusClient({ baseUrl: 'https://api.example.com/api_v1/transaction', apiKey });

async function stateOf(transactionId: string): Promise<string> {
  const record = await client.getStatus(transactionId); // POST {baseUrl}/status {api_key, transaction_ids}
  return record.state;
}
// #endregion status-client

declare const apiKey: string;
export { stateOf };
