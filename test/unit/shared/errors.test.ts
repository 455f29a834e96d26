import { IpnKitError, ListenerError, messageOf, StoreError } from '../../../lib/shared/errors.js';
import { oddThrownValues } from '../../helpers/odd-values.js';

describe('messageOf', () => {
  test.each(oddThrownValues())('never throws for %s, and answers a string', (_name, value) => {
    let message: unknown;
    expect(() => (message = messageOf(value))).not.toThrow();
    expect(typeof message).toBe('string');
  });

  test('says what it can of each odd value', () => {
    const values = new Map(oddThrownValues());
    expect(messageOf(values.get('a null-prototype object'))).toBe('[object Object]');
    expect(messageOf(values.get('a Symbol'))).toBe('Symbol(odd)');
    expect(messageOf(values.get('an object whose toString throws'))).toBe('[object Object]');
    expect(messageOf(values.get('an Error whose message is a number'))).toBe('42');
    expect(messageOf(values.get('undefined'))).toBe('undefined');
  });

  test("an Error's message, a string, or any object's string message", () => {
    expect(messageOf(new Error('ledger down'))).toBe('ledger down');
    expect(messageOf('plain text')).toBe('plain text');
    expect(messageOf({ message: 'from a plain object' })).toBe('from a plain object');
    expect(messageOf(42)).toBe('42');
  });

  test.each(oddThrownValues())('a ListenerError can be built around %s', (_name, value) => {
    const error = new ListenerError('notification', value);
    expect(error.message).toMatch(/^a listener of 'notification' failed: /);
    expect(error.cause).toBe(value);
  });
});

describe('StoreError', () => {
  test('notMigrated is false unless the store says so, and kept when a StoreError wraps it', () => {
    expect(new StoreError('timed out').notMigrated).toBe(false);
    const inner = new StoreError('no table', { cause: new Error('42P01'), notMigrated: true });
    expect(inner.notMigrated).toBe(true);
    expect(new StoreError(`wrapped: ${inner.message}`, { cause: inner }).notMigrated).toBe(true);
    expect('cause' in new StoreError('no cause')).toBe(false);
  });

  test("made from a store's StoreError, it takes that one's cause: the driver's error stays one level down", () => {
    const driver = Object.assign(new Error('connection reset'), { code: 'ECONNRESET' });
    const fromStore = new StoreError('PostgresStore: a query on ipn_inbox failed: connection reset', {
      cause: driver,
    });
    const fromRouter = new StoreError('the store failed to claim TX.1:SUCCESSFUL: connection reset', {
      cause: fromStore,
    });
    expect(fromRouter).toBeInstanceOf(IpnKitError);
    expect(fromRouter.code).toBe('IPN_STORE_FAILED');
    expect(fromRouter.cause).toBe(driver);
  });

  test('a StoreError with no cause of its own (a timeout, an odd reply) is kept as the cause', () => {
    const odd = new StoreError('RedisStore: unexpected reply to the claim script: "OK"');
    expect(new StoreError('the store failed', { cause: odd }).cause).toBe(odd);
    expect('cause' in new StoreError('no cause given')).toBe(false);
  });
});
