import { messageOf } from '../shared/errors.js';
import { within } from '../shared/within.js';
import type { IpnNotification } from '../notification/schema.js';
import type { Logger } from '../observability/logger.js';
import type { ExpectationStore } from '../stores/expectation-store.js';
import type { StatusSource } from '../status/verify-notification.js';

// Several API keys (the status client's `apiKeys`): which account's key asks about a transaction. The
// service answers "not found" to a key that did not create it, so the account is named where it is known
// (the expectation's, or the router's `accountOf`); where it is not, or its key says not found, the client
// asks with each (other) key in turn.

/** The accounts a router's status sources hold keys for: `undefined` when none holds several. */
function accountsOf(sources: ReadonlyArray<StatusSource | undefined>): ReadonlyArray<readonly string[]> {
  return sources.flatMap((source) => (Array.isArray(source?.accounts) ? [source.accounts] : []));
}

/**
 * `ipn.expect()`'s `account`, checked: a non-empty string that every status source with accounts holds a
 * key for. `undefined` when none is given.
 * @throws TypeError for any other value, an unknown account, or a router with no source of several keys.
 */
export function checkAccount(
  account: unknown,
  sources: ReadonlyArray<StatusSource | undefined>,
): string | undefined {
  if (account === undefined) return undefined;
  if (typeof account !== 'string' || account.length === 0)
    throw new TypeError(
      `ipn.expect: account must be a non-empty string, got ${JSON.stringify(account) ?? typeof account}`,
    );
  const held = accountsOf(sources);
  if (held.length === 0)
    throw new TypeError(
      `ipn.expect: account ${account} names an API key, but the router's status client has no apiKeys ` +
        '(createStatusClient({ apiKeys: { [account]: key } }))',
    );
  for (const accounts of held) {
    if (!accounts.includes(account))
      throw new TypeError(`ipn.expect: unknown account ${account} (known: ${accounts.join(', ')})`);
  }
  return account;
}

/**
 * The account the router's `accountOf` names for a notification, or `undefined` (then each key is asked in
 * turn). A function that throws or answers no string names none: asking with each key is slower, never wrong.
 */
export function accountOfNotification(
  accountOf: ((notification: IpnNotification) => string | undefined) | undefined,
  n: IpnNotification,
  logger: Logger,
): string | undefined {
  if (accountOf === undefined) return undefined;
  try {
    const account = accountOf(n);
    return typeof account === 'string' && account.length > 0 ? account : undefined;
  } catch (error) {
    logger.warn(
      { transaction_id: n.transaction_id, err: { message: messageOf(error) } },
      'accountOf threw: the status query asks with each API key in turn',
    );
    return undefined;
  }
}

/**
 * `source`, naming the account of each query as the docs rank them: the query's own `account`; else the
 * expectation's (an expected transaction); else the router's `accountOf` guess (`accountGuess`); else none:
 * each key in turn. An account the source holds no key for (an expectation kept under a name another
 * instance's configuration does not have, a wrong guess) is warned of and passed over. Only for
 * a source holding several keys: else `source` itself (a guess in the options is ignored by a status client).
 * The store's read is bounded by `ms`; a failed or late read names no account (slower, never wrong).
 */
export function accounted(
  source: StatusSource,
  expectations: ExpectationStore | undefined,
  ms: number,
  logger: Logger,
): StatusSource {
  const accounts = source.accounts;
  if (!Array.isArray(accounts) || accounts.length < 2) return source;
  const expectedAccount = async (id: string): Promise<string | undefined> => {
    if (expectations === undefined) return undefined;
    try {
      const pending = Promise.resolve().then(() => expectations.get(id));
      return (await within(pending, ms, () => new Error('late')))?.account;
    } catch {
      return undefined;
    }
  };
  /** `account` when the source holds a key for it; else `undefined` (each key in turn), warned of. */
  const held = (id: string, account: string | undefined, named: string): string | undefined => {
    if (account === undefined || accounts.includes(account)) return account;
    logger.warn(
      { transaction_id: id, account },
      `${named} ${account}, an account the status client holds no key for (known: ${accounts.join(', ')}): ` +
        'the status query asks with each API key in turn',
    );
    return undefined;
  };
  return {
    accounts,
    async getStatus(id, options) {
      const { accountGuess, ...rest } = options ?? {};
      // The router names an account only from an expectation (the sweep has it at hand): checked alike.
      const named = rest.account ?? (await expectedAccount(id));
      const account =
        held(id, named, 'the expectation names account') ?? held(id, accountGuess, 'accountOf named');
      if (account !== undefined) return source.getStatus(id, { ...rest, account });
      const { account: _unknown, ...others } = rest;
      return options === undefined ? source.getStatus(id) : source.getStatus(id, others);
    },
  };
}
