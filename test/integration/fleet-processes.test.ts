import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { describeWithService, eventually, redisUrl } from '../helpers/services.js';
import { canStartRedis, throwawayRedis, type ThrowawayRedis } from '../helpers/throwaway-redis.js';

const API_KEY = 'fleet-process-key';
const SCRIPT = join(__dirname, '..', 'processes', 'guarded-app.ts');

interface Stats {
  guard: string;
  queries: number;
  guardFailures: number;
}

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

  function start(
    prefix: string,
    extra: Record<string, unknown> = {},
  ): Promise<{ url: string; child: ChildProcess }> {
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
          ...extra,
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
    // A guard call slower than its time limit counts as Redis unreachable, and a query may then go out
    // without the fleet's lock: on this shared, busy machine a loopback Redis can take over a second, so
    // the limit is raised, and the test checks below that the guard never failed.
    const healthy = { guardTimeoutMs: 10_000 };
    const apps = await Promise.all([start(prefix, healthy), start(prefix, healthy), start(prefix, healthy)]);
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
    // Three processes verifying under one budget: a loaded machine slows them far more than this one.
    await eventually(
      'each state-flipped forgery rejected (verified before the lifecycle decides it: never a conflict)',
      () => flipped.every((tx) => events.some((e) => e.id === tx.transactionId && e.event === 'rejected')),
      60_000,
    );
    const finals = genuine.length;
    await eventually(
      'every genuine payment emitted',
      () =>
        genuine.every((tx) =>
          events.some((e) => e.id === tx.transactionId && e.event !== 'rejected' && e.event !== 'conflict'),
        ),
      60_000,
    );

    const stats = await Promise.all(apps.map((app) => statsOf(app.child)));
    expect(stats.map((each) => each.guardFailures)).toEqual([0, 0, 0]);
    expect(provider.stats.statusQueriesBlocked).toBe(0);
    expect(provider.stats.statusQueries).toBeLessThanOrEqual(100);
    for (const tx of genuine) {
      // One query, and one more for a FAILED one whose forged SUCCESSFUL copy needed an answer newer than it.
      const forgedSuccess =
        genuine.indexOf(tx) < 40 && provider.transaction(tx.transactionId)?.outcome === 'FAILED';
      expect(provider.statusQueriesFor(tx.transactionId)).toBeLessThanOrEqual(forgedSuccess ? 2 : 1);
      const emitted = events.filter(
        (e) => e.id === tx.transactionId && e.event !== 'rejected' && e.event !== 'conflict',
      );
      expect(emitted).toHaveLength(1);
      expect(emitted[0]!.amount).toBe(provider.transaction(tx.transactionId)!.amount);
    }
    expect(events.filter((e) => e.event !== 'rejected' && e.event !== 'conflict')).toHaveLength(finals);
    // A forgery that verification rejects never touches the lifecycle (issue 33).
    expect(events.filter((e) => e.event === 'conflict')).toEqual([]);
  }, 180_000);

  /** Asks an instance for its status client's stats. */
  function statsOf(child: ChildProcess): Promise<Stats> {
    return new Promise((resolve) => {
      const listener = (message: { type: string; stats?: Stats }) => {
        if (message.type !== 'stats' || !message.stats) return;
        child.off('message', listener);
        resolve(message.stats);
      };
      child.on('message', listener);
      child.send('stats');
    });
  }

  (canStartRedis() || process.env.CI === 'true' ? test : test.skip)(
    "the guard's own Redis killed mid-burst: within the fallback shares, no crash, each payment once, the fleet guard back after",
    async () => {
      // The dedupe store stays on the shared Redis; the guard has a throwaway one, killed mid-burst.
      const guardRedis: ThrowawayRedis = await throwawayRedis();
      try {
        // The first test's instances may still be verifying its forgeries (of ids such as FKP.000011, which
        // this new provider gives again): they are ended, and what they reported is dropped, before it starts.
        await Promise.all(
          children.splice(0).map(
            (child) =>
              new Promise((resolve) => {
                if (child.exitCode !== null || child.signalCode !== null) return resolve(undefined);
                child.once('exit', resolve);
                child.kill('SIGKILL');
              }),
          ),
        );
        await provider?.close();
        provider = await createFakeProvider({ apiKey: API_KEY, blockAfter: 30, resendIntervalMs: 20 });
        events.length = 0;
        const prefix = `{ipn-kit-test-fleet-kill-${process.pid}-${Date.now()}}:`;
        const extra = {
          guardRedisUrl: guardRedis.url,
          fallbackInstances: 3,
          guardTimeoutMs: 300,
          maxQueriesPerMinute: 30,
          verifyRetryDelayMs: 200,
        };
        const apps = await Promise.all([start(prefix, extra), start(prefix, extra), start(prefix, extra)]);
        const pay = (from: number, count: number) =>
          Array.from({ length: count }, (_, index) =>
            provider.initiate({
              amount: 2000 + from + index,
              ipnUrl: `${apps[(from + index) % 3]!.url}/`,
              customData: `order-${from + index}`,
              outcome: 'SUCCESSFUL',
              duplicates: 1,
            }),
          );
        const first = pay(0, 9);
        await eventually('the first half emitted', () =>
          first.every((tx) => events.some((e) => e.id === tx.transactionId)),
        );
        const second = pay(9, 9); // in flight while the guard's Redis dies
        await guardRedis.stop();
        await Promise.all(second.map((tx) => tx.delivered));
        await eventually('the second half emitted on the fallback shares', () =>
          second.every((tx) => events.some((e) => e.id === tx.transactionId)),
        );
        const during = await Promise.all(apps.map((app) => statsOf(app.child)));
        expect(during.map((stats) => stats.guard)).toEqual(['fallback', 'fallback', 'fallback']);
        // Each instance keeps to 30 / 3 = 10 a minute whatever it sent before: 30 at most, never a block.
        for (const stats of during) expect(stats.queries).toBeLessThanOrEqual(10);
        expect(provider.stats.statusQueries).toBeLessThanOrEqual(30);
        expect(provider.stats.statusQueriesBlocked).toBe(0);
        for (const app of apps) expect(app.child.exitCode).toBeNull();

        await guardRedis.start();
        const third = pay(18, 3);
        await eventually('the third batch emitted once the guard is back', () =>
          third.every((tx) => events.some((e) => e.id === tx.transactionId)),
        );
        await eventually('every instance on the fleet guard again', async () =>
          (await Promise.all(apps.map((app) => statsOf(app.child)))).some(
            (stats) => stats.guard === 'shared',
          ),
        );
        for (const tx of [...first, ...second, ...third]) {
          expect(events.filter((e) => e.id === tx.transactionId)).toHaveLength(1);
          expect(provider.statusQueriesFor(tx.transactionId)).toBeLessThanOrEqual(1);
        }
        expect(provider.stats.statusQueriesBlocked).toBe(0);
      } finally {
        await guardRedis.stop();
      }
    },
    90_000,
  );
});
