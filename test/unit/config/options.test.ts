import * as v from 'valibot';
import { z } from 'zod';
import { z as z3 } from 'zod/v3';
import { defaultLogger } from '../../../lib/observability/logger.js';
import type { Logger } from '../../../lib/observability/logger.js';
import { MemoryStore } from '../../../lib/stores/memory-store.js';
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
  it('applies every default', () => {
    const resolved = resolveOptions();
    expect(resolved.ttl).toBe(604_800_000);
    expect(resolved.limit).toBe(102_400);
    expect(resolved.storeTimeout).toBe(5000);
    expect(resolved.store).toBeInstanceOf(MemoryStore);
    expect(resolved.logger).toBe(defaultLogger);
    expect(resolved.customData).toBeUndefined();
  });

  it('gives each call its own default store', () => {
    expect(resolveOptions().store).not.toBe(resolveOptions().store);
  });

  it('ignores options set to undefined, so their defaults apply', () => {
    const resolved = resolveOptions({
      ttl: undefined,
      limit: undefined,
      storeTimeout: undefined,
      store: undefined,
      logger: undefined,
      customData: undefined,
    });
    expect(resolved).toMatchObject({ ttl: 604_800_000, limit: 102_400, storeTimeout: 5000 });
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
      ttl: 60_000,
      storeTimeout: 250,
      limit: 2048,
    });
    expect(resolved.store).toBe(store);
    expect(resolved.logger).toBe(logger);
    expect(resolved.customData).toBe(customData);
    expect(resolved).toMatchObject({ ttl: 60_000, storeTimeout: 250, limit: 2048 });
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

  it("accepts a storeTimeout of 2147483647 ms, Node's longest timer", () => {
    expect(resolveOptions({ storeTimeout: 2 ** 31 - 1 }).storeTimeout).toBe(2 ** 31 - 1);
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

    it.each([-1, 0, Number.NaN, Number.POSITIVE_INFINITY, '1000'])('a ttl of %p', (ttl) => {
      expect(() => resolveUntyped({ ttl })).toThrow(TypeError);
      expect(() => resolveUntyped({ ttl })).toThrow(/ttl/);
    });

    it.each([-1, 0, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31])(
      'a storeTimeout of %p',
      (storeTimeout) => {
        expect(() => resolveUntyped({ storeTimeout })).toThrow(TypeError);
        expect(() => resolveUntyped({ storeTimeout })).toThrow(/storeTimeout/);
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
  });
});

describe('resolveOptions, at least once', () => {
  it('applies verifyTimeout 60_000 by default, and checks it as a duration', () => {
    expect(resolveOptions().verifyTimeout).toBe(60_000);
    expect(() => resolveOptions({ verifyTimeout: 0 })).toThrow(/verifyTimeout must be a positive number/);
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
