import { z } from 'zod';

/** The two final states of a transaction. Any other state is non-final or unknown: never a success. */
export const FINAL_STATES = ['SUCCESSFUL', 'FAILED'] as const;

/** A final state: `SUCCESSFUL` or `FAILED`. */
export type FinalState = (typeof FINAL_STATES)[number];

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

/** Echoed as given at initiation: usually text, a number when the partner sent one. Never trimmed. */
const customData = z
  .union([z.string(), z.number()], { error: 'custom_data must be a string, a number or null' })
  .nullable()
  .transform((value): string => (value === null ? '' : String(value)));

/** The service's own samples spell it `comission`; expose the correct spelling only. */
function normaliseSpelling(input: unknown): unknown {
  if (typeof input !== 'object' || input === null || !Object.hasOwn(input, 'comission')) return input;
  const { comission, ...rest } = input as Record<string, unknown>;
  return { ...rest, commission: rest.commission ?? comission };
}

/**
 * The notification the service POSTs to the IPN address, as ipn-kit exposes it: every field of the interface
 * under its own name, numbers as numbers, `commission` from either spelling, unknown extra fields kept.
 * Lenient on informational fields, exact on `transaction_id`, `state` and `custom_data`.
 */
export const ipnNotificationSchema = z.preprocess(
  normaliseSpelling,
  z.looseObject({
    transaction_id: transactionId,
    state,
    custom_data: customData,
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
  }),
);

/** A validated notification: the single source of the types that listeners receive. */
export type IpnNotification = z.output<typeof ipnNotificationSchema>;
