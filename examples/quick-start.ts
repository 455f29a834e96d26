import express from 'express';
import { z } from 'zod';
import { ipnRouter } from 'ipn-kit';

const ipn = ipnRouter({
  // What you put in custom_data when you initiated the payment; the service echoes it back.
  customData: z.object({ orderId: z.string() }),
});

ipn.on('successful', (n) => {
  if (n.customDataError)
    return console.warn(`check ${n.transaction_id} by hand: ${n.customDataError.message}`);
  console.log(`credit order ${n.customData.orderId}: ${n.amount} paid (${n.transaction_id})`);
});
ipn.on('failed', (n) => console.log(`order ${n.custom_data} failed: ${n.error}`));
ipn.on('error', ({ error, notification }) => console.error(error.message, notification?.transaction_id));

const app = express();
app.use('/ipn', ipn); // before express.json() and any CSRF or bot filter
app.use(express.json()); // the rest of your app

const port = Number(process.env.PORT ?? 3000);
app.listen(port, () => console.log(`IPN endpoint: http://localhost:${port}/ipn`));
