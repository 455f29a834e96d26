/**
 * Type tests for customData with any Standard Schema (issue 18), checked by `npm run typecheck`, never run.
 * Each @ts-expect-error line must be an error: if the types loosen, tsc fails on the unused directive.
 */
import * as v from 'valibot';
import { z as z3 } from 'zod/v3';
import { ipnRouter } from '../../lib/index.js';
import type { StandardSchemaV1 } from '../../lib/notification/standard-schema.js';

// valibot: customData is the schema's output type, transforms included.
const valibot = ipnRouter({
  customData: v.object({ orderId: v.string(), qty: v.pipe(v.string(), v.transform(Number)) }),
});
valibot.on('successful', (n) => {
  if (n.customDataError) {
    // @ts-expect-error customData is undefined when customDataError is set
    void n.customData.orderId;
    return;
  }
  const orderId: string = n.customData.orderId;
  const qty: number = n.customData.qty;
  // @ts-expect-error qty is the transform's output, a number
  const qtyText: string = n.customData.qty;
  // @ts-expect-error no such field in the schema
  void n.customData.orderID;
  void [orderId, qty, qtyText];
});

// zod 3 (3.24+): the same.
const zod3 = ipnRouter({ customData: z3.object({ orderId: z3.string() }) });
zod3.on('failed', (n) => {
  if (n.customDataError) return;
  const orderId: string = n.customData.orderId;
  // @ts-expect-error orderId is a string
  const wrong: number = n.customData.orderId;
  void [orderId, wrong];
});

// A hand-written Standard Schema: its declared output type.
declare const handMade: StandardSchemaV1<unknown, { order: number }>;
ipnRouter({ customData: handMade }).on('successful', (n) => {
  if (n.customDataError) return;
  const order: number = n.customData.order;
  void order;
});

// Not a schema: refused by the type, as by the TypeError at run time.
// @ts-expect-error a plain object is not a schema
ipnRouter({ customData: { orderId: 'string' } });
// @ts-expect-error a function is not a schema
ipnRouter({ customData: (value: unknown) => value });
