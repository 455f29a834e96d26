import * as v from 'valibot';
import { z } from 'zod';
import { z as z3 } from 'zod/v3';
import { defaultLogger } from '../../../lib/observability/logger.js';
import type { Logger } from '../../../lib/observability/logger.js';
import { MemoryStore } from '../../../lib/stores/memory/memory-store.js';
import { resolveOptions } from '../../../lib/config/options.js';
import type { Options } from '../../../lib/config/options.js';
import type { Store } from '../../../lib/stores/store.js';

/** Passes options that the types forbid, as a JavaScript caller could. */
function resolveUntyped(options: Record<string, unknown>) {
  return resolveOptions(options as Partial<Options>);
}

const store: Store = { claim: () => true, release: () => undefined };

function quietLogger(): Logger {
  return { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };
}

describe('resolveOptions', () => {
  it('replayRate: 20 a second by default; a positive integer, else a TypeError', () => {
    expect(resolveOptions().replayRate).toBe(20);
    expect(resolveOptions({ replayRate: 5 }).replayRate).toBe(5);
    for (const bad of [0, -1, 1.5, Number.NaN, '10'])
      expect(() => resolveUntyped({ replayRate: bad })).toThrow(/replayRate must be a positive integer/);
  });

  it('applies every default', () => {
    const resolved = resolveOptions();
    expect(resolved.ttlMs).toBe(604_800_000);
    expect(resolved.limit).toBe(102_400);
    expect(resolved.storeTimeoutMs).toBe(5000);
    expect(resolved.store).toBeInstanceOf(MemoryStore);
    expect(resolved.logger).toBe(defaultLogger);
    expect(resolved.customData).toBeUndefined();
  });

  it('gives each call its own default store', () => {
    expect(resolveOptions().store).not.toBe(resolveOptions().store);
  });

  it('ignores options set to undefined, so their defaults apply', () => {
    const resolved = resolveOptions({
      ttlMs: undefined,
      limit: undefined,
      storeTimeoutMs: undefined,
      store: undefined,
      logger: undefined,
      customData: undefined,
    });
    expect(resolved).toMatchObject({ ttlMs: 604_800_000, limit: 102_400, storeTimeoutMs: 5000 });
    expect(resolved.store).toBeInstanceOf(MemoryStore);
    expect(resolved.logger).toBe(defaultLogger);
  });

  it('keeps the options given', () => {
    const logger = quietLogger();
    const customData = z.object({ orderId: z.string() });
    const resolved = resolveOptions({
      store,
      logger,
      customData,
      ttlMs: 60_000,
      storeTimeoutMs: 250,
      limit: 2048,
    });
    expect(resolved.store).toBe(store);
    expect(resolved.logger).toBe(logger);
    expect(resolved.customData).toBe(customData);
    expect(resolved).toMatchObject({ ttlMs: 60_000, storeTimeoutMs: 250, limit: 2048 });
  });

  it.each([
    ['1mb', 1_048_576],
    ['10kb', 10_240],
    ['512b', 512],
    ['1.5kb', 1536],
    ['1.5b', 1],
    ['100KB', 102_400],
    ['2048', 2048],
    [4096, 4096],
    [1, 1],
  ])('reads the limit %p as %d bytes', (limit, bytes) => {
    expect(resolveOptions({ limit }).limit).toBe(bytes);
  });

  it("accepts a storeTimeoutMs of 2147483647 ms, Node's longest timer", () => {
    expect(resolveOptions({ storeTimeoutMs: 2 ** 31 - 1 }).storeTimeoutMs).toBe(2 ** 31 - 1);
  });

  describe('programmer errors throw a TypeError that names the option', () => {
    it.each([
      ['claim', { release: () => undefined }],
      ['release', { claim: () => true }],
    ])('a store without %s', (method, badStore) => {
      expect(() => resolveUntyped({ store: badStore })).toThrow(TypeError);
      expect(() => resolveUntyped({ store: badStore })).toThrow(new RegExp(`store.*${method}`));
    });

    it('a store whose init is not a function', () => {
      const badStore = { ...store, init: true };
      expect(() => resolveUntyped({ store: badStore })).toThrow(TypeError);
      expect(() => resolveUntyped({ store: badStore })).toThrow(/store.*init/);
    });

    it('a store that is null', () => {
      expect(() => resolveUntyped({ store: null })).toThrow(TypeError);
      expect(() => resolveUntyped({ store: null })).toThrow(/store/);
    });

    it.each([-1, 0, Number.NaN, Number.POSITIVE_INFINITY, '1000'])('a ttlMs of %p', (ttlMs) => {
      expect(() => resolveUntyped({ ttlMs })).toThrow(TypeError);
      expect(() => resolveUntyped({ ttlMs })).toThrow(/ttlMs/);
    });

    it.each([-1, 0, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31])(
      'a storeTimeoutMs of %p',
      (storeTimeoutMs) => {
        expect(() => resolveUntyped({ storeTimeoutMs })).toThrow(TypeError);
        expect(() => resolveUntyped({ storeTimeoutMs })).toThrow(/storeTimeoutMs/);
      },
    );

    it.each(['abc', 0, -5, '10 parsecs', '', '0kb', Number.NaN, Number.POSITIVE_INFINITY])(
      'a limit of %p',
      (limit) => {
        expect(() => resolveUntyped({ limit })).toThrow(TypeError);
        expect(() => resolveUntyped({ limit })).toThrow(/limit/);
      },
    );

    it('a logger missing a method, naming the method', () => {
      const logger: Partial<Logger> = quietLogger();
      delete logger.warn;
      expect(() => resolveUntyped({ logger })).toThrow(TypeError);
      expect(() => resolveUntyped({ logger })).toThrow(/logger.*warn/);
    });

    it.each([
      ['a plain object', { orderId: 'string' }],
      ['a function', (value: unknown) => value],
      ['a string', 'z.string()'],
      ['null', null],
      ['an object with a ~standard that has no validate', { '~standard': { version: 1, vendor: 'x' } }],
    ])('a customData that is %s, not a Standard Schema', (_, customData) => {
      expect(() => resolveUntyped({ customData })).toThrow(TypeError);
      expect(() => resolveUntyped({ customData })).toThrow(/customData must be a Standard Schema/);
    });

    it.each([
      ['zod 4', z.object({ orderId: z.string() })],
      ['zod 3 (zod/v3)', z3.object({ orderId: z3.string() })],
      ['valibot', v.object({ orderId: v.string() })],
    ])('accepts a %s schema as customData', (_, customData) => {
      expect(resolveUntyped({ customData }).customData).toBe(customData);
    });

    it('an unknown option, naming it and the known ones', () => {
      expect(() => resolveUntyped({ limt: '1mb' })).toThrow(TypeError);
      expect(() => resolveUntyped({ limt: '1mb' })).toThrow(/limt/);
      expect(() => resolveUntyped({ limt: '1mb' })).toThrow(/limit/);
    });

    it('an unknown option, listing only the current names as known (the deprecated ones are not offered)', () => {
      const message = errorOf(() => resolveUntyped({ storeTimeoutMS: 100 }));
      expect(message).toMatch(/unknown option storeTimeoutMS \(known: /);
      expect(message).toMatch(/\bstoreTimeoutMs\b/);
      expect(message).not.toMatch(/\bstoreTimeout\b/);
      expect(message).not.toMatch(/\bttl\b/);
    });
  });
});

describe('resolveOptions, unexpected', () => {
  test("defaults to 'verify', takes the three values, and refuses any other", () => {
    expect(resolveUntyped({}).unexpected).toBe('verify');
    for (const value of ['verify', 'reject', 'accept'])
      expect(resolveUntyped({ unexpected: value }).unexpected).toBe(value);
    expect(() => resolveUntyped({ unexpected: 'ignore' })).toThrow(
      /unexpected must be 'verify', 'reject' or 'accept', got ignore/,
    );
  });
});

describe('resolveOptions, at least once', () => {
  it('applies verifyTimeoutMs 60_000 by default, and checks it as a duration', () => {
    expect(resolveOptions().verifyTimeoutMs).toBe(60_000);
    expect(() => resolveOptions({ verifyTimeoutMs: 0 })).toThrow(/verifyTimeoutMs must be a positive number/);
  });

  it('throws a TypeError naming the method a durable store lacks (replace), at construction', () => {
    const partial = {
      durable: true,
      claim: () => true,
      release: () => {},
      receive: () => Promise.resolve(true),
      lease: () => Promise.resolve([]),
      settle: () => Promise.resolve(true),
      list: () => Promise.resolve([]),
      get: () => Promise.resolve(undefined),
    };
    expect(() => resolveOptions({ store: partial as unknown as Store, delivery: 'at-least-once' })).toThrow(
      /store must have the methods .*; replace is not a function/,
    );
  });
});

/** The message of what `run` throws (it must throw a TypeError). */
function errorOf(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(TypeError);
    return (error as TypeError).message;
  }
  throw new Error('expected a TypeError, nothing was thrown');
}

/** A logger that records its `warn` lines. */
function recordingLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { ...quietLogger(), warn: (_object, message) => warnings.push(message), warnings };
}

/**
 * `resolveOptions` from a fresh module registry: the deprecation warnings are once per process, so each test
 * gets a "process" of its own.
 */
async function freshResolve(): Promise<typeof resolveOptions> {
  let fresh: typeof resolveOptions | undefined;
  await jest.isolateModulesAsync(async () => {
    fresh = (await import('../../../lib/config/options.js')).resolveOptions;
  });
  return fresh!;
}

describe('resolveOptions, durations named ...Ms', () => {
  it('takes ttlMs, storeTimeoutMs and verifyTimeoutMs, in milliseconds, and warns about nothing', () => {
    const logger = recordingLogger();
    const resolved = resolveOptions({ logger, ttlMs: 60_000, storeTimeoutMs: 250, verifyTimeoutMs: 9_000 });
    expect(resolved).toMatchObject({ ttlMs: 60_000, storeTimeoutMs: 250, verifyTimeoutMs: 9_000 });
    expect(logger.warnings).toEqual([]);
  });

  it('carries only the new names once resolved, even when the old ones were given', () => {
    const resolved = resolveOptions({
      logger: quietLogger(),
      ttl: 60_000,
      storeTimeout: 250,
      verifyTimeout: 9_000,
    });
    expect(resolved).toMatchObject({ ttlMs: 60_000, storeTimeoutMs: 250, verifyTimeoutMs: 9_000 });
    expect(Object.keys(resolved)).not.toContain('ttl');
    expect(Object.keys(resolved)).not.toContain('storeTimeout');
    expect(Object.keys(resolved)).not.toContain('verifyTimeout');
  });

  it.each([
    ['ttl', 'ttlMs', 123_456],
    ['storeTimeout', 'storeTimeoutMs', 250],
    ['verifyTimeout', 'verifyTimeoutMs', 9_000],
  ] as const)('still takes the deprecated %s as %s, the same milliseconds', async (old, current, ms) => {
    const resolve = await freshResolve();
    const logger = recordingLogger();
    expect(resolve({ logger, [old]: ms })[current]).toBe(ms);
    expect(logger.warnings).toHaveLength(1);
    expect(logger.warnings[0]).toContain(`the option ${old} is deprecated`);
    expect(logger.warnings[0]).toContain(`use ${current}`);
  });

  it('warns once per process for each deprecated name, however many routers are built', async () => {
    const resolve = await freshResolve();
    const first = recordingLogger();
    const second = recordingLogger();
    resolve({ logger: first, ttl: 1_000, storeTimeout: 100 });
    resolve({ logger: first, ttl: 1_000, storeTimeout: 100 });
    resolve({ logger: second, ttl: 2_000 });
    expect(first.warnings).toHaveLength(2);
    expect(first.warnings.join('\n')).toMatch(/ttl is deprecated.*use ttlMs/);
    expect(first.warnings.join('\n')).toMatch(/storeTimeout is deprecated.*use storeTimeoutMs/);
    expect(second.warnings).toEqual([]);
    resolve({ logger: second, verifyTimeout: 1_000 });
    expect(second.warnings).toEqual([
      expect.stringMatching(/verifyTimeout is deprecated.*use verifyTimeoutMs/),
    ]);
  });

  it('logs the warning on the default logger (stderr) when no logger is given', async () => {
    const resolve = await freshResolve();
    const stderr = jest.spyOn(console, 'error').mockImplementation(() => {});
    try {
      resolve({ storeTimeout: 100 });
      expect(stderr).toHaveBeenCalledTimes(1);
      expect(String(stderr.mock.calls[0]?.[0])).toMatch(
        /WARN .*storeTimeout is deprecated.*use storeTimeoutMs/,
      );
    } finally {
      stderr.mockRestore();
    }
  });

  it('survives a logger whose warn throws', async () => {
    const resolve = await freshResolve();
    const logger: Logger = {
      ...quietLogger(),
      warn: () => {
        throw new Error('log sink down');
      },
    };
    expect(resolve({ logger, ttl: 1_000 }).ttlMs).toBe(1_000);
  });

  it.each([
    ['ttl', 'ttlMs'],
    ['storeTimeout', 'storeTimeoutMs'],
    ['verifyTimeout', 'verifyTimeoutMs'],
  ])('throws a TypeError naming both when %s and %s are given different values', (old, current) => {
    const message = errorOf(() => resolveUntyped({ logger: quietLogger(), [old]: 1_000, [current]: 2_000 }));
    expect(message).toContain(old);
    expect(message).toContain(current);
    expect(message).toMatch(/different values \(1000 and 2000\)/);
  });

  it('accepts the old and the new name given the same value', () => {
    expect(resolveOptions({ logger: quietLogger(), ttl: 5_000, ttlMs: 5_000 }).ttlMs).toBe(5_000);
  });

  it('ignores a deprecated name set to undefined, so the new one (or the default) applies', () => {
    const resolved = resolveOptions({ storeTimeout: undefined, storeTimeoutMs: 300, ttl: undefined });
    expect(resolved).toMatchObject({ storeTimeoutMs: 300, ttlMs: 604_800_000 });
  });

  it('a construction refused for a wrong value does not spend the warning: the next router with the old name warns', async () => {
    const resolve = await freshResolve();
    const refused = recordingLogger();
    expect(() => resolve({ logger: refused, storeTimeout: Number.NaN })).toThrow(/storeTimeout must be/);
    expect(() => resolve({ logger: refused, ttl: 1_000, delivery: 'exactly-once' as never })).toThrow(
      TypeError,
    );
    expect(refused.warnings).toEqual([]); // the error says what to fix; the app does not start with it
    const started = recordingLogger();
    resolve({ logger: started, storeTimeout: 100, ttl: 1_000 });
    expect(started.warnings).toEqual([
      expect.stringMatching(/ttl is deprecated.*use ttlMs/),
      expect.stringMatching(/storeTimeout is deprecated.*use storeTimeoutMs/),
    ]);
  });

  it.each([['ttlMs'], ['ttl']])(
    'a %s too long for a store to hold (Number.MAX_VALUE, meant as forever) is a TypeError at construction',
    (name) => {
      // RedisStore sends it as PX: past 2^63 ms Redis refuses every claim, and every notification got 503.
      for (const value of [1e19, 1e21, Number.MAX_VALUE]) {
        const message = errorOf(() => resolveUntyped({ logger: quietLogger(), [name]: value }));
        expect(message).toMatch(new RegExp(`^ipnRouter: ${name} must be at most 9007199254740991 ms`));
      }
      expect(resolveUntyped({ logger: quietLogger(), [name]: Number.MAX_SAFE_INTEGER }).ttlMs).toBe(
        Number.MAX_SAFE_INTEGER,
      );
    },
  );

  it('an old and a new name given values String() cannot print is still the TypeError naming both', () => {
    const bare: unknown = Object.create(null);
    const message = errorOf(() => resolveUntyped({ logger: quietLogger(), ttl: bare, ttlMs: 1_000 }));
    expect(message).toMatch(/^ipnRouter: ttl and ttlMs are the same option/);
  });

  it.each([
    ['ttl', -1],
    ['storeTimeout', 0],
    ['verifyTimeout', 2 ** 31],
  ])('names the deprecated option as written when its value is wrong (%s: %p)', (old, value) => {
    const message = errorOf(() => resolveUntyped({ logger: quietLogger(), [old]: value }));
    expect(message).toMatch(new RegExp(`^ipnRouter: ${old} must be`));
  });
});
