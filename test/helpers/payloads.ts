import failed from '../fixtures/ipn-failed.json';
import successful from '../fixtures/ipn-successful.json';

/** A real-shaped SUCCESSFUL notification (service spelling `comission`, `EFB.` id), with overrides. */
export function successfulPayload(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { ...successful, ...overrides };
}

/**
 * A real-shaped FAILED notification: numbers as strings, nulls for "nothing", both `response` and `error`
 * set, a `PIX_` id, and extra fields the interface does not list.
 */
export function failedPayload(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { ...failed, ...overrides };
}

let sequence = 0;

/** A SUCCESSFUL notification with a transaction id no other test uses. */
export function uniquePayload(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  sequence += 1;
  return successfulPayload({
    transaction_id: `TST.${process.pid}${String(sequence).padStart(6, '0')}`,
    ...overrides,
  });
}
