import {
  StatusQueryError,
  StatusRateLimitError,
  TransactionNotFoundError,
} from '../../../lib/shared/errors.js';
import { ipnNotificationSchema } from '../../../lib/notification/schema.js';
import type { IpnNotification } from '../../../lib/notification/schema.js';
import type { StatusRecord } from '../../../lib/status/status-envelope.js';
import { parseStatusAnswer } from '../../../lib/status/status-envelope.js';
import { createQueryGuard } from '../../../lib/status/query-guard.js';
import {
  genuineRecord,
  mismatchesOf,
  sameCustomData,
  verifyNotification,
} from '../../../lib/status/verify-notification.js';
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
    expect(statusSource.getStatus.mock.calls[0]).toHaveLength(1);
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

  it('decides later, never rejects, when the status record has no amount (null) and the notification has one', async () => {
    const status = read({ amount: null });
    expect(status.amount).toBeNull();
    const verdict = later(await verifyNotification(source(status), read()));
    expect(String(verdict.reason)).toContain('lacks amount');
  });

  it('never confirms when neither the notification nor the answer has an amount (null == null)', async () => {
    const verdict = await verifyNotification(source(read({ amount: null })), read({ amount: null }));
    expect(later(verdict).reason).toEqual(expect.stringContaining('lacks amount'));
  });

  it.each<[string, Record<string, unknown>, string]>([
    [
      'an amount',
      { transaction_id: ID, state: 'SUCCESSFUL', custom_data: '{"orderId":"order-1001"}' },
      'amount',
    ],
    ['custom_data', { transaction_id: ID, state: 'SUCCESSFUL', amount: 5000 }, 'custom_data'],
    ['both', { transaction_id: ID, state: 'SUCCESSFUL' }, 'amount and custom_data'],
  ])(
    'decides later when the status answer lacks %s, even if the notification lacks it too',
    async (_, data, what) => {
      const status = parseStatusAnswer(ID, {
        httpStatus: 200,
        body: JSON.stringify({ data, statut_code: 200 }),
      });
      if (status instanceof Error) throw status;
      const partialNotification = read({
        amount: data.amount ?? null,
        custom_data: data.custom_data ?? null,
      });
      for (const notification of [read(), partialNotification]) {
        const verdict = later(await verifyNotification(source(status), notification));
        expect(String(verdict.reason)).toContain(`lacks ${what}`);
      }
      // Not whole: never delivered in a forgery's place either.
      const event = {
        reason: 'mismatch' as const,
        message: '',
        mismatches: [],
        notification: read(),
        status,
      };
      expect(genuineRecord(event)).toBeUndefined();
    },
  );

  it("delivers a whole record in a forgery of the same state's place, and nothing for another state", () => {
    const status = read();
    const event = { reason: 'mismatch' as const, message: '', mismatches: [], status };
    expect(genuineRecord({ ...event, notification: read({ amount: 1 }) })).toBe(status);
    expect(genuineRecord({ ...event, notification: read({ state: 'FAILED' }) })).toBeUndefined();
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

  it('does not reject on a first not-found: later, with when it was seen, to ask once more', async () => {
    const notFound = source(new TransactionNotFoundError(ID));
    const verdict = later(await verifyNotification(notFound, read(), { arrivedAt: 1_000 }));
    expect(verdict.notFoundAt).toBeGreaterThan(1_000);
    // The answer might have been cached before the notification arrived: asked again for a newer one.
    expect(notFound.getStatus.mock.calls).toEqual([[ID], [ID, { since: 1_000 }]]);
  });

  it('rejects as not_found when the service says it again after the first not-found', async () => {
    const notification = read();
    const notFound = source(new TransactionNotFoundError(ID));
    const context = { arrivedAt: 1_000, notFoundAt: 2_000 };
    const event = rejected(await verifyNotification(notFound, notification, context));
    expect(notFound.getStatus.mock.calls).toEqual([[ID], [ID, { since: 2_000 }]]);
    expect(event.message).toContain('apiKey or baseUrl');
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
      const refusal = new StatusRateLimitError(ID, reason, 41_999.2);
      const verdict = later(await verifyNotification(source(refusal), read()));
      expect(verdict.reason).toBe(refusal);
      // Rounded up, plus 25 ms: a retry at the wait to the millisecond was refused again.
      expect(verdict.retryAfterMs).toBe(42_025);
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

describe('verifyNotification: an answer older than the notification never condemns it', () => {
  /** A source answering `answers` in turn (an Error rejects), then repeating the last. */
  function inTurn(...answers: Array<StatusRecord | Error>) {
    let call = 0;
    return {
      getStatus: jest.fn<Promise<StatusRecord>, [string, { since?: number }?]>(() => {
        const answer = answers[Math.min(call++, answers.length - 1)] as StatusRecord | Error;
        return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer);
      }),
    } satisfies StatusSource;
  }

  it('a FAILED answer to a SUCCESSFUL notification is asked again for one newer than it, which confirms it', async () => {
    const statusSource = inTurn(read({ state: 'FAILED' }), read());
    const verdict = await verifyNotification(statusSource, read(), { arrivedAt: 5_000 });
    expect(verdict.kind).toBe('confirmed');
    expect(statusSource.getStatus.mock.calls).toEqual([[ID], [ID, { since: 5_000 }]]);
  });

  it('a FAILED answer confirmed by a newer one rejects the SUCCESSFUL notification', async () => {
    const verdict = await verifyNotification(inTurn(read({ state: 'FAILED' })), read(), { arrivedAt: 5_000 });
    expect(rejected(verdict).mismatches).toEqual(['state']);
  });

  it('when no newer answer may be had yet (interval), it decides later with the wait', async () => {
    const wait = new StatusRateLimitError(ID, 'interval', 30_000);
    const verdict = await verifyNotification(inTurn(read({ state: 'FAILED' }), wait), read(), {
      arrivedAt: 5_000,
    });
    expect(later(verdict)).toMatchObject({ reason: wait, retryAfterMs: 30_025 });
  });

  it.each<[string, Record<string, unknown>, Record<string, unknown>]>([
    ['a SUCCESSFUL answer to a FAILED notification', { state: 'SUCCESSFUL' }, { state: 'FAILED' }],
    ['another amount', { amount: 1 }, {}],
    ['another custom_data', { custom_data: 'other' }, {}],
  ])('%s is final: rejected at once, without asking again', async (_, status, notification) => {
    const statusSource = inTurn(read(status));
    const verdict = await verifyNotification(statusSource, read(notification), { arrivedAt: 5_000 });
    expect(verdict.kind).toBe('rejected');
    expect(statusSource.getStatus).toHaveBeenCalledTimes(1);
  });

  it('a not-found seen before keeps its time through a later verdict', async () => {
    const wait = new StatusRateLimitError(ID, 'interval', 30_000);
    const notFound = new TransactionNotFoundError(ID);
    const verdict = await verifyNotification(inTurn(notFound, wait), read(), { arrivedAt: 1, notFoundAt: 2 });
    expect(later(verdict).notFoundAt).toBe(2);
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

describe('verifyNotification (freshPending): a non-final answer cached before the notification arrived never gives it up', () => {
  const MINUTES_15 = 15 * 60_000;

  /**
   * The status client's guard on a clock the test moves (`clock.now`), over a service whose state the test
   * sets (`service.state`); `service.queries` counts the requests it got.
   */
  function guarded() {
    const clock = { now: 1_000 };
    const service = { state: 'PENDING', queries: 0 };
    const guard = createQueryGuard({
      maxQueriesPerMinute: 100,
      minIntervalMs: MINUTES_15,
      blockCooldownMs: 0,
      cacheSize: 10,
      now: () => clock.now,
    });
    const query = (): Promise<StatusRecord> => {
      guard.permit(ID);
      service.queries += 1;
      return Promise.resolve(read({ state: service.state }));
    };
    const statusSource: StatusSource = {
      getStatus: (id, options) => guard.ask(id, query, options?.since),
    };
    return { clock, service, statusSource };
  }

  it('a PENDING asked after the notification arrived is its verdict (later, pending), from the cache on retries', async () => {
    const { clock, service, statusSource } = guarded();
    const context = { arrivedAt: 900, freshPending: true }; // as the at-most-once verify queue asks
    expect(later(await verifyNotification(statusSource, read(), context)).pending?.state).toBe('PENDING');
    clock.now = 60_000; // a retry: the same answer, not asked again
    expect(later(await verifyNotification(statusSource, read(), context)).pending?.state).toBe('PENDING');
    expect(service.queries).toBe(1);
  });

  it('a PENDING cached before the notification arrived is no verdict: asked again once the guard allows, it confirms it', async () => {
    const { clock, service, statusSource } = guarded();
    const forgery = { arrivedAt: 900, freshPending: true };
    await verifyNotification(statusSource, read({ amount: 1 }), forgery); // PENDING, cached
    service.state = 'SUCCESSFUL'; // the customer pays; the genuine copy arrives
    clock.now = 2_000;
    const context = { arrivedAt: 2_000, freshPending: true };
    const refused = later(await verifyNotification(statusSource, read(), context));
    // Not the cached PENDING (on which the last attempt would reject it, not_final): the guard's wait.
    expect(refused.pending).toBeUndefined();
    expect(refused.reason).toBeInstanceOf(StatusRateLimitError);
    expect(refused).toMatchObject({
      reason: { reason: 'interval' },
      retryAfterMs: 1_000 + MINUTES_15 - 2_000 + 25, // the guard's wait, and the retry's 25 ms margin
    });
    expect(service.queries).toBe(1);

    clock.now = 1_000 + MINUTES_15; // retried no sooner than that wait
    expect(await verifyNotification(statusSource, read(), context)).toMatchObject({ kind: 'confirmed' });
    expect(service.queries).toBe(2);
  });
});
