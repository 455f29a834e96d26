import type { Logger } from './logger.js';

/**
 * How a router stands against forged notifications, for the warning and the operator's page:
 * `protected` (a `secret`, `authenticate`, `verify`, or expectations in use), `unprotected`, or
 * `acknowledged` (unprotected, and said to be on purpose with `acknowledgeUnprotected: true`).
 */
export type Protection = 'protected' | 'unprotected' | 'acknowledged';

/** What decides a router's {@link Protection}. */
export interface ProtectionInputs {
  secret: unknown;
  authenticate: unknown;
  verify: unknown;
  acknowledgeUnprotected: boolean;
  /** Whether notifications are checked against expectations now: `statusClient`, or `ipn.expect()` called. */
  expectationsInUse: () => boolean;
}

/** The warning's text: the risk, then each fix. */
export const UNPROTECTED_WARNING =
  'this IPN endpoint believes every notification posted to it: it has no `secret`, no `authenticate`, no ' +
  '`verify` and no expectations in use, so anyone who learns its address can POST a SUCCESSFUL ' +
  'notification and have an order credited. Fix it: give the service the address ipnUrl(yourUrl, secret) ' +
  'builds and pass the same `secret` to ipnRouter() (the service signs nothing: this token is the usual ' +
  'defence); and/or call ipn.expect(transactionId, { amount, customData }) when you initiate each payment; ' +
  'or set `verify` (a status query per notification) or `authenticate`. For a test or a local demo only, ' +
  'say so with `acknowledgeUnprotected: true`, which silences this line';

/**
 * The one warning of a router that nothing protects from forged notifications. Decided at the router's
 * first request, never at construction (a `next build` or a Worker's global scope builds routers that never
 * serve): by then the host has had its chance to call `ipn.expect()`. Logged once per router; never throws.
 */
export function createUnprotectedWarning(inputs: ProtectionInputs, logger: Logger) {
  let decided = false;

  const protection = (): Protection => {
    const { secret, authenticate, verify } = inputs;
    if (secret !== undefined || authenticate !== undefined || verify !== undefined) return 'protected';
    if (inputs.expectationsInUse()) return 'protected';
    return inputs.acknowledgeUnprotected ? 'acknowledged' : 'unprotected';
  };

  return {
    /** The router's state now (it turns `protected` once `ipn.expect()` is called). */
    protection,
    /** A request arrived: at the first one, warns when the router is unprotected and not acknowledged. */
    started(): void {
      if (decided) return;
      decided = true;
      if (protection() === 'unprotected') logger.warn({ unprotected: true }, UNPROTECTED_WARNING);
    },
  };
}
