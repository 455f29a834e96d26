import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { describeWithService, eventually, redisUrl } from '../helpers/services.js';

const API_KEY = 'fleet-process-key';
const SCRIPT = join(__dirname, '..', 'processes', 'guarded-app.ts');

interface Reported {
  event: string;
  id: string;
  amount: number;
}

describeWithService('Redis', 'three app processes with verify and the fleet guard', () => {
  let provider: FakeProvider;
  const children: ChildProcess[] = [];
  const events: Reported[] = [];

  afterAll(async () => {
    for (const child of children) child.kill('SIGKILL');
    await provider?.close();
  });

  function start(prefix: string): Promise<{ url: string; child: ChildProcess }> {
    const child = fork(SCRIPT, [], {
      execArgv: ['--import', 'tsx'],
      env: {
        ...process.env,
        REDIS_URL: redisUrl(),
        GUARDED: JSON.stringify({
          baseUrl: provider.statusBaseUrl,
          apiKey: API_KEY,
          prefix,
          maxQueriesPerMinute: 100,
          // A forged SUCCESSFUL of a FAILED transaction is asked again (FAILED may become SUCCESSFUL): short waits.
          minIntervalMs: 300,
          verifyRetryDelayMs: 50,
        }),
      },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    children.push(child);
    child.on('message', (message: { type: string } & Reported) => {
      if (message.type === 'event')
        events.push({ event: message.event, id: message.id, amount: message.amount });
    });
    return new Promise((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`the instance exited (${code}) before it listened`)));
      child.on('message', (message: { type: string; url?: string }) => {
        if (message.type === 'ready' && message.url) resolve({ url: message.url, child });
      });
    });
  }

  test('a burst of a few hundred notifications: within one budget, never blocked, one query per transaction, each payment once', async () => {
    // The service blocks (429) a caller past 100 queries: the fleet's budget of 100 a minute must keep all three under it.
    provider = await createFakeProvider({
      apiKey: API_KEY,
      blockAfter: 100,
      resendIntervalMs: 20,
      resends: 3,
    });
    const prefix = `{ipn-kit-test-fleet-${process.pid}-${Date.now()}}:`;
    const apps = await Promise.all([start(prefix), start(prefix), start(prefix)]);
    const genuine = Array.from({ length: 50 }, (_, index) =>
      provider.initiate({
        amount: 1000 + index,
        ipnUrl: `${apps[index % 3]!.url}/`,
        customData: `order-${index}`,
        outcome: index % 5 === 0 ? 'FAILED' : 'SUCCESSFUL',
        duplicates: 2,
        concurrent: 2,
      }),
    );
    await Promise.all(genuine.map((tx) => tx.delivered));
    // Forgeries posted to another instance than the genuine copy: another amount (the same dedupe key), the
    // other state (another key, so another verification, which the fleet's cache answers), and ids the
    // service never made.
    const flipped = genuine.slice(20, 40);
    await Promise.all([
      ...genuine.slice(0, 20).map((tx, index) =>
        provider.forge({
          ipnUrl: `${apps[(index + 1) % 3]!.url}/`,
          transactionId: tx.transactionId,
          amount: 1,
        }),
      ),
      ...flipped.map((tx, index) =>
        provider.forge({
          ipnUrl: `${apps[(index + 2) % 3]!.url}/`,
          transactionId: tx.transactionId,
          state: provider.transaction(tx.transactionId)?.outcome === 'FAILED' ? 'SUCCESSFUL' : 'FAILED',
        }),
      ),
      ...Array.from({ length: 20 }, (_, index) => provider.forge({ ipnUrl: `${apps[index % 3]!.url}/` })),
    ]);
    await eventually('each state-flipped forgery rejected', () =>
      flipped.every((tx) => events.some((e) => e.id === tx.transactionId && e.event === 'rejected')),
    );
    const finals = genuine.length;
    await eventually('every genuine payment emitted', () =>
      genuine.every((tx) => events.some((e) => e.id === tx.transactionId && e.event !== 'rejected')),
    );

    expect(provider.stats.statusQueriesBlocked).toBe(0);
    expect(provider.stats.statusQueries).toBeLessThanOrEqual(100);
    for (const tx of genuine) {
      // One query, and one more for a FAILED one whose forged SUCCESSFUL copy needed an answer newer than it.
      const forgedSuccess =
        genuine.indexOf(tx) < 40 && provider.transaction(tx.transactionId)?.outcome === 'FAILED';
      expect(provider.statusQueriesFor(tx.transactionId)).toBeLessThanOrEqual(forgedSuccess ? 2 : 1);
      const emitted = events.filter((e) => e.id === tx.transactionId && e.event !== 'rejected');
      expect(emitted).toHaveLength(1);
      expect(emitted[0]!.amount).toBe(provider.transaction(tx.transactionId)!.amount);
    }
    expect(events.filter((e) => e.event !== 'rejected')).toHaveLength(finals);
  }, 90_000);
});
