/**
 * Options of `createFakeProvider()`. Only `apiKey` is required; each other field's default is given below.
 * @inline
 */
export interface FakeProviderOptions {
  /** The API key status queries must carry in `api_key`; a query with another key gets "not found". */
  apiKey: string;
  /**
   * More accounts, as the service issues a key per currency zone: `{ [account]: key }`. A transaction
   * `initiate({ account })` creates under one answers status queries with its key only: "not found" to every
   * other key (the default account's `apiKey` included).
   * @default undefined (one account: `apiKey`'s)
   */
  apiKeys: Readonly<Record<string, string>> | undefined;
  /**
   * Resends after a non-200 answer or a network error: a notification is sent `1 + resends` times at most.
   * @default 5
   */
  resends: number;
  /** Milliseconds between two sends of a notification. @default 100 */
  resendIntervalMs: number;
  /**
   * Milliseconds between `initiate()` and the transaction becoming final (and its first notification being
   * sent). Until then its state is `PENDING1`.
   * @default 0
   */
  processingMs: number;
  /** Milliseconds before each status query is answered, to play a slow service. @default 0 */
  statusDelayMs: number;
  /**
   * Status queries answered before the caller is blocked: every further query is answered HTTP 429 with
   * `{ data: [], message: 'too many requests: caller blocked, retry in N seconds', statut_code: 429 }` (the
   * wait left, in seconds; no wait when `blockForMs` is `Infinity`), for `blockForMs`. When a
   * block ends, the count starts again from zero.
   * @default undefined (never blocks)
   */
  blockAfter: number | undefined;
  /** Milliseconds a block lasts, whether `blockAfter` or `block()` started it. @default Infinity */
  blockForMs: number;
  /**
   * The shape of `data` in a status answer: the record itself (`'object'`), or an array holding it
   * (`'array'`): both are seen from the real service.
   * @default 'object'
   */
  dataShape: 'object' | 'array';
  /**
   * How a success is written in notifications: `'SUCCESSFUL'`, or `'SUCCESS'` as the service's IPN
   * configuration page shows it (status answers always say `SUCCESSFUL`).
   * @default 'SUCCESSFUL'
   */
  successState: 'SUCCESSFUL' | 'SUCCESS';
  /** The success message field of notifications: `'response'`, or `'reponse'` as the documentation spells it. @default 'response' */
  responseField: 'response' | 'reponse';
  /**
   * A shared secret to sign notifications with: `hash` holds the hex HMAC-SHA256 of the body's JSON without
   * `hash`, and the `x-signature` header the hex HMAC-SHA256 of the body as sent (`JSON.stringify(req.body)`).
   * Forgeries (`forge()`) are never signed.
   * @default undefined (`hash` empty, no header)
   */
  hashSecret: string | undefined;
  /** The port to listen on, on 127.0.0.1. @default 0 (a free port) */
  port: number;
  /** Milliseconds to wait for the IPN endpoint's answer before counting a network error. @default 5_000 */
  timeoutMs: number;
}

/**
 * What `createFakeProvider()` takes: `apiKey` is required (a test without it would never match a status
 * query), every other option is optional, with the defaults of {@link FakeProviderOptions}.
 * @inline
 */
export type FakeProviderInit = Pick<FakeProviderOptions, 'apiKey'> &
  Partial<Omit<FakeProviderOptions, 'apiKey'>>;

/** Longest delay Node's timers take: a longer one fires after 1 ms. */
const MAX_TIMER = 2 ** 31 - 1;

const DEFAULTS: Omit<FakeProviderOptions, 'apiKey'> = {
  apiKeys: undefined,
  resends: 5,
  resendIntervalMs: 100,
  processingMs: 0,
  statusDelayMs: 0,
  blockAfter: undefined,
  blockForMs: Infinity,
  dataShape: 'object',
  successState: 'SUCCESSFUL',
  responseField: 'response',
  hashSecret: undefined,
  port: 0,
  timeoutMs: 5_000,
};

const KNOWN = new Set(['apiKey', ...Object.keys(DEFAULTS)]);

/** Applies every default in one place and throws a `TypeError` for a programmer error. */
export function resolveFakeProviderOptions(options: FakeProviderInit | undefined): FakeProviderOptions {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError("createFakeProvider: pass the options, at least { apiKey: 'test-key' }");
  }
  const given = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined));
  const unknown = Object.keys(given).filter((key) => !KNOWN.has(key));
  if (unknown.length > 0) {
    const known = [...KNOWN].join(', ');
    throw new TypeError(`createFakeProvider: unknown option ${unknown.join(', ')} (known: ${known})`);
  }
  const resolved: FakeProviderOptions = {
    apiKey: '',
    ...DEFAULTS,
    ...(given as Partial<FakeProviderOptions>),
  };
  if (typeof resolved.apiKey !== 'string' || resolved.apiKey === '') {
    throw new TypeError(
      `createFakeProvider: apiKey is required, a non-empty string such as 'test-key' (got ${describe(options.apiKey)})`,
    );
  }
  const { apiKeys } = resolved;
  if (
    apiKeys !== undefined &&
    (typeof apiKeys !== 'object' ||
      apiKeys === null ||
      Object.values(apiKeys).some((key) => typeof key !== 'string' || key === ''))
  ) {
    throw new TypeError(
      `createFakeProvider: apiKeys must map each account to a non-empty key (got ${describe(apiKeys)})`,
    );
  }
  checkCount('createFakeProvider', 'resends', resolved.resends);
  checkDelay('resendIntervalMs', resolved.resendIntervalMs);
  checkDelay('processingMs', resolved.processingMs);
  checkDelay('statusDelayMs', resolved.statusDelayMs);
  checkDelay('timeoutMs', resolved.timeoutMs);
  if (resolved.blockAfter !== undefined) checkCount('createFakeProvider', 'blockAfter', resolved.blockAfter);
  if (
    typeof resolved.blockForMs !== 'number' ||
    Number.isNaN(resolved.blockForMs) ||
    resolved.blockForMs <= 0
  ) {
    throw new TypeError(
      `createFakeProvider: blockForMs must be a number of milliseconds above 0, or Infinity (got ${describe(resolved.blockForMs)})`,
    );
  }
  if (resolved.dataShape !== 'object' && resolved.dataShape !== 'array') {
    throw new TypeError(
      `createFakeProvider: dataShape must be 'object' or 'array' (got ${describe(resolved.dataShape)})`,
    );
  }
  if (resolved.successState !== 'SUCCESSFUL' && resolved.successState !== 'SUCCESS') {
    throw new TypeError(
      `createFakeProvider: successState must be 'SUCCESSFUL' or 'SUCCESS' (got ${describe(resolved.successState)})`,
    );
  }
  if (resolved.responseField !== 'response' && resolved.responseField !== 'reponse') {
    throw new TypeError(
      `createFakeProvider: responseField must be 'response' or 'reponse' (got ${describe(resolved.responseField)})`,
    );
  }
  if (
    resolved.hashSecret !== undefined &&
    (typeof resolved.hashSecret !== 'string' || resolved.hashSecret === '')
  ) {
    throw new TypeError(
      `createFakeProvider: hashSecret must be a non-empty string (got ${describe(resolved.hashSecret)})`,
    );
  }
  if (!Number.isInteger(resolved.port) || resolved.port < 0 || resolved.port > 65535) {
    throw new TypeError(
      `createFakeProvider: port must be an integer from 0 to 65535 (got ${describe(resolved.port)})`,
    );
  }
  return resolved;
}

/** Throws unless `value` is a whole number of at least `min`; `where` names the function called. */
export function checkCount(where: string, name: string, value: unknown, min = 0): void {
  if (!Number.isSafeInteger(value) || (value as number) < min) {
    throw new TypeError(`${where}: ${name} must be an integer of at least ${min} (got ${describe(value)})`);
  }
}

/** Throws unless `value` is a delay a Node timer can wait. */
function checkDelay(name: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > MAX_TIMER) {
    throw new TypeError(
      `createFakeProvider: ${name} must be a number of milliseconds from 0 to ${MAX_TIMER} (got ${describe(value)})`,
    );
  }
}

/** A value as a message shows it: strings quoted, the rest as JSON would write them. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return `'${value}'`;
  if (typeof value === 'number' || value === undefined || typeof value === 'bigint') return String(value);
  try {
    return JSON.stringify(value) ?? typeof value;
  } catch {
    return typeof value;
  }
}
