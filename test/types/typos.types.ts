/**
 * Type tests for typos (issue 18), checked by `npm run typecheck` (tsc --noEmit), never run. Each
 * @ts-expect-error line must be an error: if the types loosen, tsc fails on the unused directive.
 */
import { z } from 'zod';
import {
  ipnRouter,
  IpnKitError,
  type StatusError,
  type IpnKitErrorCode,
  type IpnNotification,
} from '../../lib/index.js';
import { createFakeProvider } from '../../lib/testing.js';

declare const n: IpnNotification;

// The notification has no index signature: a misspelt field is an error, not `unknown`.
// @ts-expect-error amount is spelt with one m
void n.ammount;
// @ts-expect-error the field is transaction_id, as the service sends it
void n.transactionId;
// @ts-expect-error the success message is `response` (the service's `reponse` is not a field of its own)
void n.reponse;
// @ts-expect-error only the correct spelling is exposed
void n.comission;
// @ts-expect-error a field the interface does not list is under extra
void n.currency;
const currency: unknown = n.extra.currency; // unknown fields: kept, under extra
const extra: Record<string, unknown> = n.extra;
// @ts-expect-error extra's values are unknown until checked
const currencyText: string = n.extra.currency;
void [currency, extra, currencyText];

// Without a customData schema, customData and customDataError are not on the notification at all.
const plain = ipnRouter();
plain.on('successful', (notification) => {
  // @ts-expect-error customData exists only with a schema
  void notification.customData;
  // @ts-expect-error customDataError exists only with a schema
  void notification.customDataError;
  // @ts-expect-error a misspelt field of a notification with no schema
  void notification.ammount;
});
const typed = ipnRouter({ customData: z.object({ orderId: z.string() }) });
typed.on('successful', (notification) => {
  if (notification.customDataError) return;
  const orderId: string = notification.customData.orderId;
  // @ts-expect-error a misspelt field of a notification with a schema
  void notification.custom_dat;
  void orderId;
});

// error.code is a union of the real codes.
declare const error: IpnKitError;
const code: IpnKitErrorCode = error.code;
// @ts-expect-error no such code: the comparison is always false
if (error.code === 'IPN_STORE_FAIL') void code;
// @ts-expect-error codes are upper case
if (error.code === 'ipn_store_failed') void code;
if (error.code === 'IPN_STORE_FAILED' || error.code === 'IPN_NOT_DURABLE') void code;
// @ts-expect-error an IpnKitError is made with a real code only
void new IpnKitError('IPN_WHATEVER', 'message');
declare const statusError: StatusError;
const statusCode: StatusError['code'] = statusError.code;
// @ts-expect-error a status error never has a store code
if (statusError.code === 'IPN_STORE_FAILED') void statusCode;
typed.on('error', ({ error: failure }) => {
  // @ts-expect-error no such code, in the error event either
  if (failure.code === 'IPN_LISTENER_FAILD') void failure;
});

// createFakeProvider: apiKey is required, other options are optional and checked by name.
void createFakeProvider({ apiKey: 'test-key' });
void createFakeProvider({ apiKey: 'test-key', resends: 2, dataShape: 'array' });
// @ts-expect-error apiKey is required
void createFakeProvider({});
// @ts-expect-error apiKey is required
void createFakeProvider({ resends: 2 });
// @ts-expect-error the option is apiKey
void createFakeProvider({ apikey: 'test-key' });
// @ts-expect-error the option is resends
void createFakeProvider({ apiKey: 'test-key', retries: 3 });
// @ts-expect-error dataShape is 'object' or 'array'
void createFakeProvider({ apiKey: 'test-key', dataShape: 'list' });
