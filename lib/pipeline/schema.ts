import { z } from 'zod';

/** The two final states of a transaction. Any other state is non-final or unknown: never a success. */
export const FINAL_STATES = ['SUCCESSFUL', 'FAILED'] as const;

/** A final state: `SUCCESSFUL` or `FAILED`. */
export type FinalState = (typeof FINAL_STATES)[number];

/** Whether `state` is final. Any other state, known or not, is never taken for an outcome. */
export function isFinalState(state: string): state is FinalState {
  return (FINAL_STATES as readonly string[]).includes(state);
}

/** The fields that say which transaction, which outcome and which order: read exactly, never guessed. */
export const IDENTITY_FIELDS = ['transaction_id', 'state', 'custom_data'] as const;

const DECIMAL = /^-?\d+(?:\.\d+)?$/;

/**
 * Informational number: a number, or a decimal string (`"0"` is seen for `fee`). `null`, `""`, a missing
 * field, or anything unreadable becomes `null`: an informational field never rejects a payment.
 */
const lenientNumber = z
  .unknown()
  .optional()
  .transform((value): number | null => {
    if (typeof value === 'number') return Number.isFinite(value) ? value : null;
    if (typeof value === 'string' && DECIMAL.test(value.trim())) return Number(value);
    return null;
  });

/** Informational text: `null`, missing and anything that is not text become `""` (the service mixes them). */
const lenientString = z
  .unknown()
  .optional()
  .transform((value): string => {
    if (typeof value === 'string') return value;
    if (typeof value === 'number' || typeof value === 'boolean') return String(value);
    return '';
  });

/** `provider_id` is `null` in every sample; keep whatever scalar arrives. */
const lenientScalar = z
  .unknown()
  .optional()
  .transform((value): string | number | null =>
    typeof value === 'string' || typeof value === 'number' ? value : null,
  );

/**
 * Identity fields are exact: they decide who gets credited. `transaction_id` shapes seen are `EFB.001158` and
 * `PIX_22827809`; the pattern allows any such short token without hard-coding one prefix or separator.
 */
const transactionId = z
  .string({ error: 'transaction_id must be a string' })
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/, {
    error: 'transaction_id must be 1 to 128 letters, digits, ".", "_", ":" or "-" (such as EFB.001158)',
  });

const state = z
  .string({ error: 'state must be a string' })
  .regex(/^[A-Za-z0-9_-]{1,32}$/, { error: 'state must be a word such as SUCCESSFUL, FAILED or PENDING' });

/**
 * Echoed as given at initiation, as text: never trimmed or changed. Usually a string. A number, or JSON that
 * came back decoded, is its exact source text when the router read the body itself; behind a host parser it
 * is re-serialised, and refused when that could not be exact (an integer above 2^53, which could name
 * another order). Missing or `null` is `""`: never reject a payment over the partner's own data.
 */
const customDataText = z
  .unknown()
  .optional()
  .transform((value, context): string => {
    if (typeof value === 'string') return value;
    if (value === null || value === undefined) return '';
    const text = exactText(value);
    if (text !== undefined) return text;
    const message = 'custom_data could not be read exactly (an integer above 2^53?): send it as a string';
    context.issues.push({ code: 'custom', message, input: value });
    return z.NEVER;
  });

/** The JSON text of a value a host parser decoded, or `undefined` when it cannot be exact or serialised. */
function exactText(value: unknown): string | undefined {
  let exact = true;
  try {
    const text = JSON.stringify(value, (_key, item: unknown) => {
      if (typeof item === 'number' && Number.isInteger(item) && !Number.isSafeInteger(item)) exact = false;
      return item;
    });
    return exact && typeof text === 'string' ? text : undefined;
  } catch {
    return undefined; // circular, or a BigInt
  }
}

/**
 * Keys a payload must not be able to supply: the ones ipn-kit adds to a notification, and every name of
 * `Object.prototype` (`toString`, `valueOf`, `hasOwnProperty`, `__proto__`, ...), which as own properties
 * would break partner code such as `String(n)` or `n.hasOwnProperty('amount')`.
 */
const RESERVED = new Set([
  'customData',
  'customDataError',
  'rawState',
  ...Object.getOwnPropertyNames(Object.prototype),
]);

/**
 * Spellings of a final state that the service's own documentation uses besides the interface's: the IPN
 * configuration page's sample sends `SUCCESS`. Read as the final state they name, never guessed further.
 */
const STATE_ALIASES: Readonly<Record<string, FinalState>> = { SUCCESS: 'SUCCESSFUL' };

/** Informational fields the service also spells another way: the other spelling, then the one exposed. */
const SPELLINGS = [
  ['comission', 'commission'],
  ['reponse', 'response'],
] as const;

const isEmpty = (value: unknown): boolean => value === undefined || value === null || value === '';

/**
 * The service's own samples spell `comission` and `reponse`: expose the correct spellings only. `SUCCESS`
 * becomes `SUCCESSFUL` (kept as received in `rawState`). Drop reserved keys. One copy at most, on the path
 * every real notification takes.
 */
function normalise(input: unknown): unknown {
  if (typeof input !== 'object' || input === null) return input;
  const record = input as Record<string, unknown>;
  const alias = typeof record.state === 'string' ? STATE_ALIASES[record.state] : undefined;
  const misspelt = SPELLINGS.filter(([other]) => Object.hasOwn(record, other));
  const keys = Object.keys(record);
  if (alias === undefined && misspelt.length === 0 && !keys.some((key) => RESERVED.has(key))) return input;
  const copy: Record<string, unknown> = {};
  for (const key of keys) {
    if (!RESERVED.has(key) && !SPELLINGS.some(([other]) => other === key)) copy[key] = record[key];
  }
  for (const [other, exposed] of misspelt) {
    if (isEmpty(copy[exposed])) copy[exposed] = record[other];
  }
  if (alias !== undefined) {
    copy.rawState = record.state;
    copy.state = alias;
  }
  return copy;
}

/**
 * The notification the service POSTs to the IPN address, as ipn-kit exposes it: every field of the interface
 * under its own name, numbers as numbers, `commission` and `response` from either spelling, `SUCCESS` read
 * as `SUCCESSFUL` (`rawState` keeps it), unknown extra fields kept.
 * Lenient on informational fields, exact on `transaction_id`, `state` and `custom_data`.
 */
export const ipnNotificationSchema = z.preprocess(
  normalise,
  z.looseObject({
    transaction_id: transactionId,
    state,
    custom_data: customDataText,
    amount: lenientNumber,
    benefice: lenientNumber,
    commission: lenientNumber,
    fee: lenientNumber,
    destination: lenientString,
    response: lenientString,
    error: lenientString,
    service_id: lenientNumber,
    customer_name: lenientString,
    ipn_url: lenientString,
    provider_id: lenientScalar,
    sms_link: lenientNumber,
    created_at: lenientString,
    updated_at: lenientString,
    ipn_state: lenientNumber,
    w_amount_after_transaction: lenientString,
    p_last_wallet_amount: lenientNumber,
    p_new_wallet_amount: lenientNumber,
    p_id: lenientNumber,
    hash: lenientString,
    /**
     * The state as received, only when it was another spelling of a final state (`SUCCESS`, read as
     * `SUCCESSFUL` in `state`, in the events and in the dedupe key). Absent otherwise.
     */
    rawState: z.string().optional(),
  }),
);

/** A validated notification: the single source of the types that listeners receive. */
export type IpnNotification = z.output<typeof ipnNotificationSchema>;
