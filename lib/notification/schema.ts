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

/**
 * What each listed field's schema does to a value that passes, as a plain function: the one definition that
 * both the zod schema and {@link fastParse} use. A field whose function gives {@link UNSURE} is left to zod
 * (an issue to report, or a case the fast path does not cover); {@link OMIT}, a key the output leaves out.
 */
const CONVERSIONS = new Map<z.ZodType, (value: unknown) => unknown>();
const UNSURE: unique symbol = Symbol('unsure');
const OMIT: unique symbol = Symbol('omit');

/** `schema`, whose passing values `convert` maps as the schema does (see {@link CONVERSIONS}). */
function converting<T extends z.ZodType>(schema: T, convert: (value: unknown) => unknown): T {
  CONVERSIONS.set(schema, convert);
  return schema;
}

const DECIMAL = /^-?\d+(?:\.\d+)?$/;

const toLenientNumber = (value: unknown): number | null => {
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  if (typeof value === 'string' && DECIMAL.test(value.trim())) return Number(value);
  return null;
};
const toLenientString = (value: unknown): string => {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return '';
};
const toLenientScalar = (value: unknown): string | number | null =>
  typeof value === 'string' || typeof value === 'number' ? value : null;

/**
 * Informational number: a number, or a decimal string (`"0"` is seen for `fee`). `null`, `""`, a missing
 * field, or anything unreadable becomes `null`: an informational field never rejects a payment.
 */
const lenientNumber = converting(
  z
    .unknown()
    .optional()
    .transform((value): number | null => toLenientNumber(value)),
  toLenientNumber,
);

/** Informational text: `null`, missing and anything that is not text become `""` (the service mixes them). */
const lenientString = converting(
  z
    .unknown()
    .optional()
    .transform((value): string => toLenientString(value)),
  toLenientString,
);

/** `provider_id` is `null` in every sample; keep whatever scalar arrives. */
const lenientScalar = converting(
  z
    .unknown()
    .optional()
    .transform((value): string | number | null => toLenientScalar(value)),
  toLenientScalar,
);

/**
 * Identity fields are exact: they decide who gets credited. `transaction_id` shapes seen are `EFB.001158` and
 * `PIX_22827809`; the pattern allows any such short token without hard-coding one prefix or separator.
 */
const TRANSACTION_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const transactionId = converting(
  z.string({ error: 'transaction_id must be a string' }).regex(TRANSACTION_ID, {
    error: 'transaction_id must be 1 to 128 letters, digits, ".", "_", ":" or "-" (such as EFB.001158)',
  }),
  (value) => (typeof value === 'string' && TRANSACTION_ID.test(value) ? value : UNSURE),
);

const STATE = /^[A-Za-z0-9_-]{1,32}$/;
const state = converting(
  z
    .string({ error: 'state must be a string' })
    .regex(STATE, { error: 'state must be a word such as SUCCESSFUL, FAILED or PENDING' }),
  (value) => (typeof value === 'string' && STATE.test(value) ? value : UNSURE),
);

/**
 * Echoed as given at initiation, as text: never trimmed or changed. Usually a string. A number, or JSON that
 * came back decoded, is its exact source text when the router read the body itself; behind a host parser it
 * is re-serialised, and refused when that could not be exact (an integer above 2^53, which could name
 * another order). Missing or `null` is `""`: never reject a payment over the partner's own data.
 */
const customDataText = converting(
  z
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
    }),
  // Decoded JSON (behind a host parser) is zod's to serialise, or to refuse.
  (value) => (typeof value === 'string' ? value : value === null || value === undefined ? '' : UNSURE),
);

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

const isReserved = (key: string): boolean => RESERVED.has(key);

const isEmpty = (value: unknown): boolean => value === undefined || value === null || value === '';

/**
 * The service's own samples spell `comission` and `reponse`: expose the correct spellings only. `SUCCESS`
 * becomes `SUCCESSFUL` (kept as received in `rawState`). Drop reserved keys. One copy at most, on the path
 * every real notification takes.
 */
function normalise(input: unknown): unknown {
  if (typeof input !== 'object' || input === null) return input;
  const record = input as Record<string, unknown>;
  const alias = aliasOf(record);
  const keys = Object.keys(record);
  if (
    alias === undefined &&
    !SPELLINGS.some(([other]) => Object.hasOwn(record, other)) &&
    !keys.some(isReserved)
  )
    return input;
  const misspelt = SPELLINGS.filter(([other]) => Object.hasOwn(record, other));
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

/** The final state `record.state` is another spelling of, if it is one. */
function aliasOf(record: Record<string, unknown>): FinalState | undefined {
  // Own keys only: a state named like a property of every object ('constructor') is no alias.
  return typeof record.state === 'string' && Object.hasOwn(STATE_ALIASES, record.state)
    ? STATE_ALIASES[record.state]
    : undefined;
}

/**
 * The fields the interface lists, each with what is known of it, and `rawState` (ipn-kit's own). The TSDoc here
 * is what an editor shows on a notification's fields: sources are the published interface and what real
 * payloads show.
 */
const fields = {
  /**
   * The transaction's identifier, returned at initiation: the key to your order. Exact: 1 to 128 letters,
   * digits, `.`, `_`, `:` or `-` (shapes seen: `EFB.001158`, `PIX_22827809`).
   */
  transaction_id: transactionId,
  /**
   * `SUCCESSFUL` or `FAILED` in a notification: the only two final states, and the state decides the outcome
   * (not `response` or `error`). Any other word (`PENDING`, `PENDING1`, ...) is non-final or unknown: never a
   * success.
   */
  state,
  /**
   * What you gave at initiation, echoed back as text, unchanged (never trimmed); `""` when missing or `null`.
   * A number or decoded JSON is its exact source text. Parsed into `customData` when you give a schema.
   */
  custom_data: customDataText,
  /**
   * The transaction amount, as a number; `null` when missing or unreadable. Its currency is not stated by the
   * interface: some payloads carry it as a `currency` field (`XOF`, the West African CFA franc, which has no
   * minor unit), found in `extra.currency`. Whether it is in major or minor units: unknown (not documented).
   * Check it against your order.
   */
  amount: lenientNumber,
  /** A number the interface lists without saying what it means or how it is computed: unknown. */
  benefice: lenientNumber,
  /**
   * A commission on the transaction: who pays it, its unit and how it is computed are unknown. Read from
   * either spelling, `commission` or the service's own `comission`.
   */
  commission: lenientNumber,
  /** A fee on the transaction (sometimes sent as text, `"0"`): its unit and who pays it are unknown. */
  fee: lenientNumber,
  /** The destination number of the transaction (digits, may start with 0): the customer's. Personal data. */
  destination: lenientString,
  /**
   * The service's message when the transaction succeeded; `""` on failure. Not reliable (a FAILED sample also
   * says "operation success"): `state` decides.
   */
  response: lenientString,
  /** The service's error message when the transaction failed; `""` otherwise. Not reliable: `state` decides. */
  error: lenientString,
  /** Integer identifier of the service used (which services exist is not documented). Check it against your records. */
  service_id: lenientNumber,
  /** Name of the customer or of the partner (the interface says either). Personal data. */
  customer_name: lenientString,
  /** The IPN address; `""` in every payload seen. */
  ipn_url: lenientString,
  /** `null` in every payload seen; meaning unknown. A string, a number or `null`. */
  provider_id: lenientScalar,
  /** An integer in notifications; meaning unknown. */
  sms_link: lenientNumber,
  /** When the transaction was created, as sent: `YYYY-MM-DDThh:mm:ss.SSS+00:00` (text, not parsed). */
  created_at: lenientString,
  /** When the transaction was last updated, in the format of `created_at`. */
  updated_at: lenientString,
  /** An integer in notifications; meaning unknown. */
  ipn_state: lenientNumber,
  /** Text, `""` in every payload seen; meaning unknown (by its name, a wallet amount: not documented). */
  w_amount_after_transaction: lenientString,
  /** A number in notifications, `null` in status answers; meaning unknown (not documented). */
  p_last_wallet_amount: lenientNumber,
  /** `null` in every payload seen; meaning unknown. */
  p_new_wallet_amount: lenientNumber,
  /** An integer (text in some notifications); meaning unknown. */
  p_id: lenientNumber,
  /**
   * `""` in every payload seen. The service's documentation says it confirms the notification comes from the
   * service, but no source says how it is computed: ipn-kit does not check it (use `verify` and `secret`).
   */
  hash: lenientString,
  /**
   * ipn-kit's own, not a field of the interface (a payload cannot supply it): the state as received, only when
   * it was another spelling of a final state (`SUCCESS`, read as `SUCCESSFUL` in `state`, in the events and in
   * the dedupe key). Absent otherwise.
   */
  rawState: converting(z.string().optional(), (value) =>
    value === undefined ? OMIT : typeof value === 'string' ? value : UNSURE,
  ),
};

/**
 * The fields the interface lists, as a notification carries them. Written from `typeof fields`, so that the
 * published declarations keep each field's TSDoc.
 */
export type IpnListedFields = z.output<z.ZodObject<typeof fields>>;

/** Fields the interface does not list, kept as they arrived (prototype-polluting keys dropped). */
export type IpnExtraFields = Record<string, unknown>;

/** What `extra` adds to the listed fields. */
export interface IpnExtra {
  /**
   * Every field of the payload the interface does not list, as it arrived: seen are `currency` (`XOF`),
   * `transaction_channel` (`wave`) and link fields for some wallets. `{}` when there are none. Never a reason
   * to reject a notification.
   */
  extra: IpnExtraFields;
}

/** Moves every field the interface does not list under `extra`, so typos in field names do not type-check. */
function gatherExtra(record: Record<string, unknown>): IpnListedFields & IpnExtra {
  const known: Record<string, unknown> = {};
  const extra: IpnExtraFields = {};
  for (const key of Object.keys(record)) {
    if (Object.hasOwn(fields, key)) known[key] = record[key];
    else extra[key] = record[key];
  }
  return { ...(known as IpnListedFields), extra };
}

/**
 * A notification as a plain record, its `extra` fields back beside the listed ones: what a durable store keeps,
 * so that parsing it again gives the same notification (and rows kept before `extra` existed still parse).
 */
export function toRecord(notification: IpnListedFields & IpnExtra): Record<string, unknown> {
  const { extra, rawState, ...known } = notification;
  // The state as received: parsing it again reads `SUCCESS` as `SUCCESSFUL` and keeps `rawState` once more.
  return { ...extra, ...known, ...(rawState === undefined ? {} : { state: rawState }) };
}

/**
 * The notification the service POSTs to the IPN address, as ipn-kit exposes it: every field of the interface
 * under its own name, numbers as numbers, `commission` and `response` from either spelling, `SUCCESS` read as
 * `SUCCESSFUL` (`rawState` keeps it), fields the interface does not list under `extra`. Lenient on informational fields, exact on `transaction_id`, `state` and `custom_data`.
 */
export const ipnNotificationSchema: z.ZodType<IpnListedFields & IpnExtra, unknown> = z.preprocess(
  normalise,
  z.looseObject(fields).transform(gatherExtra),
);

/** A validated notification: the single source of the types that listeners receive. */
export type IpnNotification = z.output<typeof ipnNotificationSchema>;

/** A listed field, the function its schema applies, and the service's other spelling of it (if any). */
type FastField = readonly [key: string, convert: (value: unknown) => unknown, other: string | undefined];

/**
 * Each listed field as a {@link FastField}, in the schema's order (the order zod's output has); `undefined`,
 * which turns the fast path off, if a field's schema has no conversion, or if {@link listedInOrder} does not
 * write the fields the schema lists, in its order.
 */
const FAST_FIELDS: readonly FastField[] | undefined = (() => {
  const entries: FastField[] = [];
  for (const [key, schema] of Object.entries(fields)) {
    const convert = CONVERSIONS.get(schema);
    if (convert === undefined) return undefined;
    entries.push([key, convert, SPELLINGS.find(([, exposed]) => exposed === key)?.[0]]);
  }
  return writesInOrder(entries.map(([key]) => key)) ? entries : undefined;
})();

/**
 * The listed fields, from their values in the schema's order, `rawState` apart (last, and absent unless an
 * alias was read). Written out as one object literal because it is the object every notification is made
 * as: one given its two dozen keys one at a time from a list costs several times more (V8 stores each key
 * through its generic path, and turns an object that grows past about 20 keys into a dictionary).
 */
function listedInOrder(v: readonly unknown[]): Record<string, unknown> {
  return {
    transaction_id: v[0],
    state: v[1],
    custom_data: v[2],
    amount: v[3],
    benefice: v[4],
    commission: v[5],
    fee: v[6],
    destination: v[7],
    response: v[8],
    error: v[9],
    service_id: v[10],
    customer_name: v[11],
    ipn_url: v[12],
    provider_id: v[13],
    sms_link: v[14],
    created_at: v[15],
    updated_at: v[16],
    ipn_state: v[17],
    w_amount_after_transaction: v[18],
    p_last_wallet_amount: v[19],
    p_new_wallet_amount: v[20],
    p_id: v[21],
    hash: v[22],
  };
}

/** Whether {@link listedInOrder} writes each of `names` (the schema's, in its order) at its place, then `rawState`. */
function writesInOrder(names: readonly string[]): boolean {
  const written = Object.entries(listedInOrder(names));
  return (
    names.at(-1) === 'rawState' &&
    written.length === names.length - 1 &&
    written.every(([key, value], index) => key === names[index] && value === key)
  );
}

/** The names of the listed fields. */
const LISTED: ReadonlySet<string> = new Set(Object.keys(fields));

/** The other spellings of listed fields (`comission`), which `normalise` drops. */
const OTHER_SPELLINGS: ReadonlySet<string> = new Set(SPELLINGS.map(([other]) => other));

/**
 * What `ipnNotificationSchema.safeParse(input)` gives for a notification of the common shape, made without
 * zod's machinery (a few times cheaper, on the path every request takes): the same value, the same keys in
 * the same order. `undefined` whenever zod could find an issue or the input is not of that shape: zod, the
 * one judge of errors, decides then. The conversions are the schema's own (see {@link CONVERSIONS}).
 */
export function fastParse(input: unknown): IpnNotification | undefined {
  if (FAST_FIELDS === undefined || typeof input !== 'object' || input === null || Array.isArray(input))
    return undefined;
  let record = input as Record<string, unknown>;
  let keys = Object.keys(record);
  // The service's own samples spell `comission`: a copy that only drops it is not made, the other spelling
  // is read in place as `normalise` reads it. An alias of a state or a reserved key takes `normalise`'s copy.
  if (!readsInPlace(record, keys)) {
    record = normalise(record) as Record<string, unknown>;
    keys = Object.keys(record);
  }
  const values: unknown[] = [];
  for (const [key, convert, other] of FAST_FIELDS) {
    const value = convert(other === undefined ? record[key] : spelled(record, key, other));
    if (value === UNSURE) return undefined;
    values.push(value);
  }
  const output = listedInOrder(values);
  const rawState = values[values.length - 1];
  if (rawState !== OMIT) output.rawState = rawState;
  const extra: IpnExtraFields = {};
  for (const key of keys) if (!LISTED.has(key) && !OTHER_SPELLINGS.has(key)) extra[key] = record[key];
  output.extra = extra;
  return output as unknown as IpnNotification;
}

/**
 * Whether `normalise` would copy `record` for nothing but other spellings of fields: no alias of a state, no
 * reserved key. Read in place, its fields (missing ones included) must read as in a copy made by `normalise`,
 * which is a plain object: so `record` must be one too.
 */
function readsInPlace(record: Record<string, unknown>, keys: string[]): boolean {
  return (
    Object.getPrototypeOf(record) === Object.prototype &&
    aliasOf(record) === undefined &&
    !keys.some(isReserved)
  );
}

/** A field with another spelling, as `normalise` exposes it: its own value, else the other's when that is there. */
function spelled(record: Record<string, unknown>, key: string, other: string): unknown {
  const value = record[key];
  return isEmpty(value) && Object.hasOwn(record, other) ? record[other] : value;
}

/**
 * `ipnNotificationSchema.safeParse(input)`, through {@link fastParse} when it can answer: what the router
 * validates every notification with.
 */
export function parseNotification(input: unknown): z.ZodSafeParseResult<IpnNotification> {
  const data = fastParse(input);
  return data === undefined ? ipnNotificationSchema.safeParse(input) : { success: true, data };
}
