import { checkCount, describe } from './fake-provider-options.js';
import type { FinalState } from '../notification/schema.js';

/**
 * A transaction to start with `provider.initiate()`, and how its notification is delivered.
 * @inline
 */
export interface InitiateOptions {
  /** Transaction amount, above 0. */
  amount: number;
  /** Where the notification is POSTed: your IPN endpoint. */
  ipnUrl: string;
  /** Echoed in `custom_data`: a string, or a number (echoed as a JSON number, as some partners see). */
  customData: string | number;
  /** The final state the transaction reaches. */
  outcome: FinalState;
  /** Destination number. @default '07' followed by digits of the transaction id (10 digits) */
  destination?: string;
  /** @default 'Awa Kone' */
  customerName?: string;
  /** @default 12 */
  serviceId?: number;
  /** The id to give the transaction; must be new to this provider. @default the next `FKP.000001` */
  transactionId?: string;
  /**
   * The account (an `apiKeys` name of the provider) the transaction is created under: its status answers
   * "not found" to any other key. @default the default account, `apiKey`'s
   */
  account?: string;
  /** `false`: the transaction becomes final but is never notified (for reconcile tests). @default true */
  deliver?: boolean;
  /** Copies of the first delivery sent at once, as when the service retries before you answered. @default 1 */
  concurrent?: number;
  /**
   * Extra copies sent one after another once the notification was acknowledged, each resent until it is
   * answered 200 too (every `resendIntervalMs`, `resends` times at most), as the service does: a copy your
   * endpoint answers 503 (`verification_pending` with `verify`, at most once) is sent again, so the POSTs
   * can outnumber `1 + duplicates`. @default 0
   */
  duplicates?: number;
  /** Notify the opposite final state first (delivered until acknowledged), then the real one. @default false */
  outOfOrder?: boolean;
}

/**
 * One notification to forge with `provider.forge()`. Any other key is a field of the notification body,
 * overriding the built one (`{ hash: 'x', p_id: 9 }`).
 * @inline
 */
export interface ForgeOptions {
  /** Where the forged notification is POSTed. */
  ipnUrl: string;
  /**
   * The id notified: one the provider never processed, or a real one (its stored fields are sent, altered by
   * the options). @default a fresh `FRG.000001`
   */
  transactionId?: string;
  /** @default 'SUCCESSFUL' */
  state?: string;
  /** @default the real transaction's, or '' */
  customData?: string | number;
  /** @default the real transaction's, or 5000 */
  amount?: number;
  [field: string]: unknown;
}

const STATES: readonly unknown[] = ['SUCCESSFUL', 'FAILED'];

/** Throws a `TypeError` for invalid `initiate()` options; returns the IPN address. */
export function checkInitiate(plan: InitiateOptions, taken: (id: string) => boolean): string {
  const fail = (message: string): never => {
    throw new TypeError(`initiate: ${message}`);
  };
  if (typeof plan !== 'object' || plan === null) fail('pass { amount, ipnUrl, customData, outcome }');
  if (typeof plan.amount !== 'number' || !Number.isFinite(plan.amount) || plan.amount <= 0) {
    fail(`amount must be a number above 0 (got ${describe(plan.amount)})`);
  }
  const ipnUrl = httpUrl('initiate', plan.ipnUrl);
  if (typeof plan.customData !== 'string' && typeof plan.customData !== 'number') {
    fail(`customData must be a string or a number (got ${describe(plan.customData)})`);
  }
  if (!STATES.includes(plan.outcome)) {
    fail(`outcome must be 'SUCCESSFUL' or 'FAILED' (got ${describe(plan.outcome)})`);
  }
  if (plan.transactionId !== undefined) {
    if (typeof plan.transactionId !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._:-]*$/.test(plan.transactionId)) {
      fail(`transactionId must be a token such as 'EFB.001158' (got ${describe(plan.transactionId)})`);
    }
    if (taken(plan.transactionId))
      fail(`transactionId ${plan.transactionId} was already used by this provider`);
  }
  for (const name of ['destination', 'customerName'] as const) {
    const value = plan[name];
    if (value !== undefined && typeof value !== 'string')
      fail(`${name} must be a string (got ${describe(value)})`);
  }
  if (plan.serviceId !== undefined) checkCount('initiate', 'serviceId', plan.serviceId);
  if (plan.concurrent !== undefined) checkCount('initiate', 'concurrent', plan.concurrent, 1);
  if (plan.duplicates !== undefined) checkCount('initiate', 'duplicates', plan.duplicates);
  return ipnUrl;
}

/** Throws a `TypeError` for invalid `forge()` options; returns the IPN address. */
export function checkForge(forgery: ForgeOptions): string {
  if (typeof forgery !== 'object' || forgery === null) throw new TypeError('forge: pass { ipnUrl, ... }');
  return httpUrl('forge', forgery.ipnUrl);
}

/** `value` as an http(s) URL, or a `TypeError` naming the option. */
export function httpUrl(where: string, value: unknown): string {
  let url: URL | undefined;
  try {
    url = typeof value === 'string' ? new URL(value) : undefined;
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new TypeError(
      `${where}: ipnUrl must be an http(s) URL such as 'http://127.0.0.1:3000/ipn' (got ${describe(value)})`,
    );
  }
  return url.href;
}
