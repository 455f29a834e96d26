import { createStatusClient, StatusRateLimitError } from '../../../lib/index.js';
import type { SharedGuard } from '../../../lib/status/shared-guard.js';
import { monotonicNow } from '../../../lib/shared/clock.js';
import { successfulPayload } from '../../helpers/payloads.js';
import { quiet } from '../../helpers/quiet-logger.js';

const BASE = 'https://api.example.com/api_v1/transaction';
const ID = 'EFB.001158';

/**
 * A shared guard whose cache is empty at the first read and holds `entry` from then on: another instance
 * cached its answer between this one's read and its lock.
 */
function guardCachingBetweenReadAndLock(entry: () => string): SharedGuard & { readonly reads: number } {
  let reads = 0;
  return {
    get reads() {
      return reads;
    },
    take: () => Promise.resolve({ granted: true, retryAfterMs: 0, left: 29 }),
    block: () => Promise.resolve(),
    read: () => {
      reads += 1;
      return Promise.resolve(reads === 1 ? undefined : entry());
    },
    write: () => Promise.resolve(),
    lock: () => Promise.resolve(true),
    unlock: () => Promise.resolve(),
    fallbackInstances: undefined,
    finalTtlMs: 24 * 3_600_000,
    timeoutMs: 1_000,
  };
}

describe('the fleet guard reads the shared cache again under the lock, under the rules of `since`', () => {
  const fetchRecord = (state: string) =>
    jest.fn(() =>
      Promise.resolve(
        new Response(
          JSON.stringify({
            data: successfulPayload({ transaction_id: ID, state }),
            message: '',
            statut_code: 200,
          }),
          { status: 200, headers: { 'content-type': 'application/json' } },
        ),
      ),
    );

  test('an answer older than `since` found under the lock is not taken; the service is asked', async () => {
    const since = monotonicNow();
    const stale = JSON.stringify({
      record: successfulPayload({ transaction_id: ID, state: 'FAILED' }),
      at: since - 60 * 60_000, // an hour old: past minIntervalMs
      lacking: [],
    });
    const fetch = fetchRecord('SUCCESSFUL');
    const shared = guardCachingBetweenReadAndLock(() => stale);
    const client = createStatusClient({ baseUrl: BASE, apiKey: 'k', fetch, logger: quiet, shared });

    await expect(client.getStatus(ID, { since })).resolves.toMatchObject({ state: 'SUCCESSFUL' });
    expect(shared.reads).toBe(2);
    expect(fetch).toHaveBeenCalledTimes(1);
  });

  test('one older than `since` but cached less than minIntervalMs ago: refused (interval), nothing sent', async () => {
    const since = monotonicNow();
    const recent = JSON.stringify({ notFound: true, at: since - 5 });
    const fetch = fetchRecord('SUCCESSFUL');
    const shared = guardCachingBetweenReadAndLock(() => recent);
    const client = createStatusClient({ baseUrl: BASE, apiKey: 'k', fetch, logger: quiet, shared });

    const error = await client.getStatus(ID, { since }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(StatusRateLimitError);
    expect(error).toMatchObject({ reason: 'interval' });
    expect((error as StatusRateLimitError).retryAfterMs).toBeGreaterThan(14 * 60_000);
    expect(shared.reads).toBe(2);
    expect(fetch).not.toHaveBeenCalled();
  });
});
