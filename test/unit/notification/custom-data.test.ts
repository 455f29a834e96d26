import * as v from 'valibot';
import * as zm from 'zod/mini';
import { z } from 'zod';
import { z as z3 } from 'zod/v3';
import { parseCustomData } from '../../../lib/notification/custom-data.js';
import type { CustomDataResult } from '../../../lib/notification/custom-data.js';
import { CustomDataError, IpnKitError } from '../../../lib/shared/errors.js';
import type { StandardSchemaV1 } from '../../../lib/notification/standard-schema.js';

function valueOf<T>(result: CustomDataResult<T>): T {
  if ('customDataError' in result) throw new Error(`expected a match: ${result.customDataError.message}`);
  return result.customData;
}

function errorOf<T>(result: CustomDataResult<T>): CustomDataError {
  if (!('customDataError' in result)) throw new Error('expected a mismatch');
  return result.customDataError;
}

describe('parseCustomData', () => {
  it('parses JSON text that matches the schema', () => {
    const schema = z.object({ orderId: z.string(), items: z.array(z.number()) });
    expect(valueOf(parseCustomData(schema, '{"orderId":"order-1001","items":[1,2]}'))).toEqual({
      orderId: 'order-1001',
      items: [1, 2],
    });
  });

  it('applies the schema transforms to the JSON value', () => {
    const schema = z.object({ orderId: z.string().transform((id) => id.toUpperCase()) });
    expect(valueOf(parseCustomData(schema, '{"orderId":"order-1001"}'))).toEqual({ orderId: 'ORDER-1001' });
  });

  it('takes the raw string when it is not JSON and the schema is a string', () => {
    expect(valueOf(parseCustomData(z.string(), 'order-42'))).toBe('order-42');
  });

  it('keeps the raw string untrimmed', () => {
    expect(valueOf(parseCustomData(z.string(), '  order-42 '))).toBe('  order-42 ');
  });

  it('reads "42" as the number 42 for a number schema', () => {
    expect(valueOf(parseCustomData(z.number(), '42'))).toBe(42);
  });

  it('reads "42" as the string "42" for a string schema', () => {
    expect(valueOf(parseCustomData(z.string(), '42'))).toBe('42');
  });

  it('returns a CustomDataError with the field paths when the JSON does not match', () => {
    const schema = z.object({ orderId: z.string(), customer: z.object({ id: z.number() }) });
    const error = errorOf(parseCustomData(schema, '{"orderId":5,"customer":{"id":"x"}}'));
    expect(error).toBeInstanceOf(CustomDataError);
    expect(error).toBeInstanceOf(IpnKitError);
    expect(error.code).toBe('IPN_CUSTOM_DATA_INVALID');
    expect(error.name).toBe('CustomDataError');
    expect(error.issues.map((issue) => issue.path)).toEqual(['orderId', 'customer.id']);
    for (const issue of error.issues) expect(issue.message).not.toBe('');
    expect(error.message).toContain('orderId');
    expect(error.message).toContain('customer.id');
  });

  it('returns a CustomDataError for a raw string that matches neither way', () => {
    const error = errorOf(parseCustomData(z.object({ orderId: z.string() }), 'order-42'));
    expect(error).toBeInstanceOf(CustomDataError);
    expect(error.code).toBe('IPN_CUSTOM_DATA_INVALID');
    expect(error.issues.length).toBeGreaterThan(0);
  });

  it('returns a CustomDataError for an empty custom_data and a schema that needs a value', () => {
    const error = errorOf(parseCustomData(z.object({ orderId: z.string() }), ''));
    expect(error.code).toBe('IPN_CUSTOM_DATA_INVALID');
  });

  it('keeps the zod error as the cause', () => {
    const error = errorOf(parseCustomData(z.number(), 'order-42'));
    expect(error.cause).toBeInstanceOf(z.ZodError);
  });

  it('drops a __proto__ key from the JSON, so it pollutes nothing', () => {
    const schema = z.looseObject({ orderId: z.string() });
    const value = valueOf(parseCustomData(schema, '{"orderId":"order-1001","__proto__":{"polluted":true}}'));
    expect(value).toEqual({ orderId: 'order-1001' });
    expect(Object.hasOwn(value, '__proto__')).toBe(false);
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect((value as Record<string, unknown>).polluted).toBeUndefined();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('drops nested constructor.prototype keys from the JSON', () => {
    const schema = z.record(z.string(), z.unknown());
    const value = valueOf(
      parseCustomData(schema, '{"a":{"constructor":{"prototype":{"polluted":true}},"b":1}}'),
    );
    expect(value).toEqual({ a: { b: 1 } });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});

describe('parseCustomData with a zod/mini schema', () => {
  it('parses JSON custom_data and reports a mismatch the same way', () => {
    const schema = zm.object({ orderId: zm.string() });
    expect(parseCustomData(schema, '{"orderId":"order-7"}')).toEqual({ customData: { orderId: 'order-7' } });
    const result = parseCustomData(schema, '{"orderId":7}');
    expect('customDataError' in result && result.customDataError.issues).toEqual([
      { path: 'orderId', message: expect.any(String) },
    ]);
  });
});

describe('parseCustomData with a Standard Schema other than zod 4', () => {
  it('valibot: parses JSON custom_data, applies transforms, and reports a mismatch with its paths', () => {
    const schema = v.object({ orderId: v.string(), qty: v.pipe(v.string(), v.transform(Number)) });
    expect(parseCustomData(schema, '{"orderId":"order-7","qty":"3"}')).toEqual({
      customData: { orderId: 'order-7', qty: 3 },
    });
    const error = errorOf(parseCustomData(schema, '{"orderId":7,"qty":"3"}'));
    expect(error).toBeInstanceOf(CustomDataError);
    expect(error.code).toBe('IPN_CUSTOM_DATA_INVALID');
    expect(error.issues).toEqual([{ path: 'orderId', message: expect.stringContaining('string') }]);
    expect(error.message).toContain('orderId');
    expect(error.cause).toEqual([expect.objectContaining({ message: error.issues[0]?.message })]);
  });

  it('valibot: takes the raw string when it is not JSON', () => {
    expect(valueOf(parseCustomData(v.string(), 'order-42'))).toBe('order-42');
    expect(valueOf(parseCustomData(v.number(), '42'))).toBe(42);
  });

  it('zod 3 (zod/v3): parses and reports a mismatch the same way', () => {
    const schema = z3.object({ orderId: z3.string() });
    expect(valueOf(parseCustomData(schema, '{"orderId":"order-8"}'))).toEqual({ orderId: 'order-8' });
    expect(errorOf(parseCustomData(schema, '{"orderId":8}')).issues).toEqual([
      { path: 'orderId', message: expect.any(String) },
    ]);
  });

  it('a hand-written Standard Schema: path segments given as { key } are read too', () => {
    const schema: StandardSchemaV1<unknown, never> = {
      '~standard': {
        version: 1,
        vendor: 'test',
        validate: () => ({ issues: [{ message: 'no', path: [{ key: 'items' }, 0, 'id'] }] }),
      },
    };
    expect(errorOf(parseCustomData(schema, '{}')).issues).toEqual([{ path: 'items.0.id', message: 'no' }]);
  });

  it('an asynchronous schema is a CustomDataError saying so, and its promise never rejects unhandled', async () => {
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown) => void rejections.push(reason);
    process.on('unhandledRejection', onRejection);
    try {
      const schema = v.pipeAsync(
        v.string(),
        v.checkAsync(() => Promise.reject(new Error('lookup failed')), 'unknown order'),
      );
      const error = errorOf(parseCustomData(schema, 'order-1'));
      expect(error.code).toBe('IPN_CUSTOM_DATA_INVALID');
      expect(error.message).toMatch(/asynchronous/);
      await new Promise((resolve) => setImmediate(resolve));
      expect(rejections).toEqual([]);
    } finally {
      process.off('unhandledRejection', onRejection);
    }
  });

  it('a schema whose validate throws is a CustomDataError, not a crash', () => {
    const schema = v.pipe(
      v.string(),
      v.transform(() => {
        throw new Error('boom');
      }),
    );
    expect(errorOf(parseCustomData(schema, 'order-1')).message).toMatch(/threw: boom/);
  });
});
