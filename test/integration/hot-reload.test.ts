import { ipnRouter, MemoryStore, type Logger } from '../../lib/index.js';

// `next dev` evaluates a route module again at every edit: a store kept on globalThis (as Prisma's client
// usually is) but a router built at module scope makes one more router on it each time, each with its
// recovery and timers. The second open router on one store object is told, once.

function recordingLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return {
    warnings,
    debug: () => {},
    info: () => {},
    warn: (_o, message) => void warnings.push(message),
    error: () => {},
  };
}

describe('a second router built on the same store', () => {
  test('warns once per store, naming the globalThis pattern, however many routers follow', async () => {
    const store = new MemoryStore();
    const logger = recordingLogger();
    const routers = [1, 2, 3, 4, 5].map(() => ipnRouter({ store, logger }));

    expect(logger.warnings).toEqual([expect.stringContaining('globalThis')]);
    expect(logger.warnings[0]).toContain('next dev');
    await Promise.all(routers.map((router) => router.close()));
  });

  test('one router per store, or a router built after the previous one closed, is not warned', async () => {
    const logger = recordingLogger();
    const first = ipnRouter({ store: new MemoryStore(), logger });
    const second = ipnRouter({ store: new MemoryStore(), logger });
    const store = new MemoryStore();
    const before = ipnRouter({ store, logger });
    await before.close();
    const after = ipnRouter({ store, logger });

    expect(logger.warnings).toEqual([]);
    await Promise.all([first.close(), second.close(), after.close()]);
  });
});
