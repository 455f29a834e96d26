import {
  StatusQueryError,
  StatusRateLimitError,
  TransactionNotFoundError,
} from '../../../lib/pipeline/errors.js';
import { ipnNotificationSchema } from '../../../lib/pipeline/schema.js';
import type { IpnNotification } from '../../../lib/pipeline/schema.js';
import type { StatusRecord } from '../../../lib/status/status-envelope.js';
import { mismatchesOf, sameCustomData, verifyNotification } from '../../../lib/status/verify-notification.js';
import type { StatusSource, Verdict } from '../../../lib/status/verify-notification.js';
import { successfulPayload } from '../../helpers/payloads.js';

const ID = 'EFB.001158';

/** A record read by the schema, as both the router and the status client expose it. */
function read(overrides: Record<string, unknown> = {}): IpnNotification {
  return ipnNotificationSchema.parse(successfulPayload(overrides));
}

/** A status source answering `answer` (or rejecting with it, when it is an Error). */
function source(answer: StatusRecord | Error) {
  return {
    getStatus: jest.fn<Promise<StatusRecord>, [string]>(() =>
      answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer),
    ),
  } satisfies StatusSource;
}

function rejected(verdict: Verdict) {
  if (verdict.kind !== 'rejected') throw new Error(`expected a rejected verdict, got ${verdict.kind}`);
  return verdict.event;
}

function later(verdict: Verdict) {
  if (verdict.kind !== 'later') throw new Error(`expected a later verdict, got ${verdict.kind}`);
  return verdict;
}

describe('verifyNotification', () => {
  it('confirms a notification whose state, amount and custom_data match, asking about its id', async () => {
    const status = read({ hash: null, response: '' });
    const statusSource = source(status);
    const verdict = await verifyNotification(statusSource, read());
    expect(verdict).toEqual({ kind: 'confirmed', status });
    expect(statusSource.getStatus).toHaveBeenCalledTimes(1);
    expect(statusSource.getStatus).toHaveBeenCalledWith(ID);
  });

  it('confirms a FAILED notification the service reports FAILED', async () => {
    const verdict = await verifyNotification(source(read({ state: 'FAILED' })), read({ state: 'FAILED' }));
    expect(verdict.kind).toBe('confirmed');
  });

  it('ignores informational fields that differ', async () => {
    const status = read({ fee: 10, comission: 1, customer_name: 'Someone Else', p_id: null });
    expect((await verifyNotification(source(status), read())).kind).toBe('confirmed');
  });

  it.each<[string, Record<string, unknown>, string[]]>([
    ['state', { state: 'FAILED' }, ['state']],
    ['amount', { amount: 50 }, ['amount']],
    ['custom_data', { custom_data: '{"orderId":"order-9999"}' }, ['custom_data']],
    ['all three', { state: 'FAILED', amount: 50, custom_data: 'other' }, ['state', 'amount', 'custom_data']],
  ])(
    'rejects a notification whose %s differs, listing the mismatches',
    async (_what, differences, fields) => {
      const notification = read();
      const status = read(differences);
      const event = rejected(await verifyNotification(source(status), notification));
      expect(event.reason).toBe('mismatch');
      expect(event.mismatches).toEqual(fields);
      expect(event.notification).toBe(notification);
      expect(event.status).toBe(status);
      expect(event.message).toContain(ID);
      expect(event.message).toContain(fields.join(', '));
    },
  );

  it('rejects a notification when the status record has no amount (null) and the notification has one', async () => {
    const status = read({ amount: null });
    expect(status.amount).toBeNull();
    const event = rejected(await verifyNotification(source(status), read()));
    expect(event.reason).toBe('mismatch');
    expect(event.mismatches).toEqual(['amount']);
  });

  it('compares custom_data exactly: surrounding spaces are a difference', async () => {
    const event = rejected(
      await verifyNotification(
        source(read({ custom_data: 'order-1001 ' })),
        read({ custom_data: 'order-1001' }),
      ),
    );
    expect(event.mismatches).toEqual(['custom_data']);
  });

  it('rejects a notification of a transaction the service does not know as not_found', async () => {
    const notification = read();
    const event = rejected(await verifyNotification(source(new TransactionNotFoundError(ID)), notification));
    expect(event.reason).toBe('not_found');
    expect(event.mismatches).toEqual([]);
    expect(event.notification).toBe(notification);
    expect(event.status).toBeUndefined();
    expect(event.message).toContain(ID);
  });

  it('decides later, with the record as pending, while the service reports a non-final state', async () => {
    const status = read({ state: 'PENDING1' });
    const verdict = later(await verifyNotification(source(status), read()));
    expect(verdict.pending).toBe(status);
    expect(verdict.retryAfterMs).toBe(0);
    expect(String(verdict.reason)).toContain('PENDING1');
  });

  it('never confirms an unknown state, even when amount and custom_data match', async () => {
    const verdict = await verifyNotification(source(read({ state: 'successful' })), read());
    expect(verdict.kind).toBe('later');
  });

  it.each([['budget' as const], ['blocked' as const]])(
    'decides later after a StatusRateLimitError (%s), with its retryAfterMs',
    async (reason) => {
      const refusal = new StatusRateLimitError(ID, reason, 42_000);
      const verdict = later(await verifyNotification(source(refusal), read()));
      expect(verdict.reason).toBe(refusal);
      expect(verdict.retryAfterMs).toBe(42_000);
      expect(verdict.pending).toBeUndefined();
    },
  );

  it('decides later after a StatusQueryError', async () => {
    const failure = new StatusQueryError(ID, 'the status query got no answer', { retryable: true });
    const verdict = later(await verifyNotification(source(failure), read()));
    expect(verdict.reason).toBe(failure);
    expect(verdict.retryAfterMs).toBe(0);
  });

  it('decides later when a custom source fails with any other error', async () => {
    const bug = new Error('custom source bug');
    const verdict = later(await verifyNotification(source(bug), read()));
    expect(verdict.reason).toBe(bug);
    expect(verdict.retryAfterMs).toBe(0);
  });

  it('decides later when a custom source throws synchronously', async () => {
    const bug = new TypeError('not a function');
    const throwing: StatusSource = {
      getStatus: () => {
        throw bug;
      },
    };
    const verdict = later(await verifyNotification(throwing, read()));
    expect(verdict.reason).toBe(bug);
  });
});

describe('mismatchesOf', () => {
  it('is empty for the same record', () => {
    expect(mismatchesOf(read(), read())).toEqual([]);
  });

  it('counts a custom_data left out of the status answer ("") as a difference', () => {
    expect(mismatchesOf(read(), read({ custom_data: null }))).toEqual(['custom_data']);
  });
});

describe('sameCustomData', () => {
  it.each([
    ['order-1', 'order-1'],
    ['{"orderId": "o1", "n": 2}', '{"n":2,"orderId":"o1"}'],
    ['12.50', '12.5'],
    ['[1, 2]', '[1,2]'],
  ])('takes %s and %s for the same custom_data', (a, b) => {
    expect(sameCustomData(a, b)).toBe(true);
  });

  it.each([
    ['order-1', 'order-2'],
    [' order-1', 'order-1'],
    ['{"orderId":"o1"}', '{"orderId":"o2"}'],
    ['12345678901234567891', '12345678901234567890'],
    ['{"id":12345678901234567891}', '{"id":12345678901234567890}'],
  ])('tells %s from %s', (a, b) => {
    expect(sameCustomData(a, b)).toBe(false);
  });
});
