import { ipnRouter, MemoryStore } from '../../lib/index.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { uniquePayload } from '../helpers/payloads.js';
import { until } from '../helpers/until.js';

const serve = servedRouters();
const HEX_SHA256 = /^[0-9a-f]{64}$/;

describe('the listener context idempotencyKey', () => {
  test('at least once: the same key on the failed attempt, its retry, and a replay on another instance', async () => {
    const store = new MemoryStore();
    const options = {
      store,
      delivery: 'at-least-once',
      retryDelayMs: 20,
      logger: quiet,
      acknowledgeUnprotected: true,
    } as const;
    const { ipn, post } = await serve(ipnRouter(options));
    const seen: Array<{ idempotencyKey: string; attempt: number; by: string }> = [];
    ipn.on('successful', (n, { idempotencyKey, attempt }) => {
      seen.push({ idempotencyKey, attempt, by: 'first' });
      if (attempt === 1) throw new Error('the SMS gateway timed out');
    });
    const payload = uniquePayload();
    const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
    expect((await post(payload)).status).toBe(200);
    await until(() => seen.length === 2, 'the retry');
    for (let status; status !== 'delivered'; status = (await ipn.inbox.get(key))?.status)
      await new Promise((resolve) => setTimeout(resolve, 5));

    // The first instance stops; another one on the same store (a restart) replays the notification.
    await ipn.close();
    const { ipn: other } = await serve(ipnRouter(options));
    other.on('successful', (n, { idempotencyKey, attempt }) => {
      seen.push({ idempotencyKey, attempt, by: 'other' });
    });
    expect(await other.inbox.replay(key)).toBe(true);
    await until(() => seen.length === 3, 'the replay');

    expect(seen.map(({ attempt, by }) => [by, attempt])).toEqual([
      ['first', 1],
      ['first', 2],
      ['other', 1],
    ]);
    const keys = new Set(seen.map(({ idempotencyKey }) => idempotencyKey));
    expect(keys.size).toBe(1);
    expect([...keys][0]).toMatch(HEX_SHA256);
  });

  test('at most once: SUCCESSFUL and FAILED of one transaction get different keys, each stable', async () => {
    const contexts = new Map<string, string[]>();
    const listen = (ipn: ReturnType<typeof ipnRouter>) =>
      ipn.on('notification', (n, { idempotencyKey }) => {
        contexts.set(n.state, [...(contexts.get(n.state) ?? []), idempotencyKey]);
      });
    // Two routers with stores of their own: a resend is no duplicate for the second, so each state is emitted
    // twice, by two "instances" that share nothing.
    const a = await serve(ipnRouter({ logger: quiet, acknowledgeUnprotected: true }));
    const b = await serve(ipnRouter({ logger: quiet, acknowledgeUnprotected: true }));
    listen(a.ipn);
    listen(b.ipn);
    const successful = uniquePayload();
    const failed = { ...successful, state: 'FAILED', response: '', error: 'insufficient balance' };
    for (const served of [a, b]) {
      expect((await served.post(failed)).status).toBe(200);
      expect((await served.post(successful)).status).toBe(200);
    }
    await until(() => contexts.get('SUCCESSFUL')?.length === 2, 'both SUCCESSFUL');
    await until(() => contexts.get('FAILED')?.length === 2, 'both FAILED');

    const [success, again] = contexts.get('SUCCESSFUL')!;
    const [failure, failureAgain] = contexts.get('FAILED')!;
    expect(success).toMatch(HEX_SHA256);
    expect(failure).toMatch(HEX_SHA256);
    expect(again).toBe(success);
    expect(failureAgain).toBe(failure);
    expect(failure).not.toBe(success);
  });
});
