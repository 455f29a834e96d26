import { ListenerError } from '../../../lib/shared/errors.js';
import { loggableError } from '../../../lib/observability/redact.js';
import { oddThrownValues } from '../../helpers/odd-values.js';

const notification = {
  transaction_id: 'EFB.1',
  state: 'SUCCESSFUL',
  destination: '0700000001',
  customer_name: 'Awa Kone',
};

describe('loggableError', () => {
  test.each(oddThrownValues())('never throws for a listener that threw %s', (_name, value) => {
    let described: Record<string, unknown> | undefined;
    expect(
      () => (described = loggableError(new ListenerError('successful', value), notification)),
    ).not.toThrow();
    expect(described).toMatchObject({ type: 'ListenerError', code: 'IPN_LISTENER_FAILED' });
    expect(typeof described?.message).toBe('string');
    expect(() => JSON.stringify(described)).not.toThrow();
  });

  test('scrubs the customer from a non-string message and from a thrown plain object', () => {
    const numeric = Object.assign(new Error('x'), { message: 700000001 });
    const described = loggableError(new ListenerError('successful', numeric), {
      ...notification,
      destination: '700000001',
    });
    expect(JSON.stringify(described)).not.toContain('700000001');

    const plain = loggableError(
      new ListenerError('successful', { message: 'no credit for Awa Kone' }),
      notification,
    );
    expect(JSON.stringify(plain)).not.toContain('Awa Kone');
    expect(plain.message).toBe("a listener of 'successful' failed: no credit for [redacted]");
  });

  test('a cause chain that loops is cut short', () => {
    const a = new Error('a');
    const b = new Error('b', { cause: a });
    (a as { cause?: unknown }).cause = b;
    expect(() => JSON.stringify(loggableError(new ListenerError('failed', a), notification))).not.toThrow();
  });
});
