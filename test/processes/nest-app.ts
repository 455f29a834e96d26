// The NestJS example (examples/nestjs) in a process of its own, as NestJS 12 is ESM-only and jest loads
// CommonJS: every event is printed as a line of JSON for test/integration/nestjs.test.ts to read.
import { createStatusClient, ipnRouter, type IpnEvents } from 'ipn-kit';
import { createNestApp } from '../../examples/nestjs/app';

async function main(): Promise<void> {
  const ipn = ipnRouter({
    verify: createStatusClient({
      baseUrl: process.env.PAYMENT_STATUS_URL ?? '',
      apiKey: process.env.PAYMENT_API_KEY ?? '',
    }),
    logger: { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} },
  });
  const names: (keyof IpnEvents)[] = [
    'notification',
    'successful',
    'failed',
    'duplicate',
    'invalid',
    'rejected',
    'conflict',
    'error',
  ];
  for (const event of names) {
    ipn.on(event, (payload: unknown) => {
      const p = payload as {
        transaction_id?: string;
        custom_data?: string;
        reason?: string;
        status?: number;
      };
      const notification = (payload as { notification?: { custom_data?: string } }).notification;
      const custom_data = p.custom_data ?? notification?.custom_data;
      console.log(
        JSON.stringify({
          event,
          transaction_id: p.transaction_id,
          custom_data,
          reason: p.reason,
          status: p.status,
        }),
      );
    });
  }
  const app = await createNestApp(ipn);
  app.useLogger(false);
  await app.listen(Number(process.env.PORT), '127.0.0.1');
  console.log(JSON.stringify({ event: 'listening' }));
}

void main();
