import { guardLogger, type Logger } from '../../../lib/observability/logger.js';
import { ipnRouter } from '../../../lib/index.js';

const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => void unhandled.push(reason);
beforeAll(() => process.on('unhandledRejection', onUnhandled));
afterAll(() => process.off('unhandledRejection', onUnhandled));

/** Lets pending rejections surface as `unhandledRejection` (Node reports them after the microtasks). */
const drain = () => new Promise((resolve) => setTimeout(resolve, 0));

/** A logger whose every method returns a rejected promise, as an async transport that lost its sink. */
function rejecting(): Logger & { calls: string[] } {
  const calls: string[] = [];
  const method = (level: string) => (_object: Record<string, unknown>, message: string) => {
    calls.push(`${level}: ${message}`);
    return Promise.reject(new Error('log sink down')) as unknown as void;
  };
  return {
    calls,
    debug: method('debug'),
    info: method('info'),
    warn: method('warn'),
    error: method('error'),
  };
}

describe('guardLogger', () => {
  test('a method that returns a rejected promise is called, and its rejection is caught', async () => {
    const logger = rejecting();
    const guarded = guardLogger(logger);
    for (const level of ['debug', 'info', 'warn', 'error'] as const) guarded[level]({}, level);
    await drain();
    expect(logger.calls).toEqual(['debug: debug', 'info: info', 'warn: warn', 'error: error']);
    expect(unhandled.splice(0)).toEqual([]);
  });

  test('a method that throws is isolated too', () => {
    const guarded = guardLogger({
      debug() {},
      info() {},
      warn() {},
      error() {
        throw new Error('sink down');
      },
    });
    expect(() => guarded.error({}, 'x')).not.toThrow();
  });
});

test('a router whose logger rejects on every line still reports a failing listener through error, without an unhandled rejection', async () => {
  const logger = rejecting();
  const ipn = ipnRouter({ logger });
  const errors: string[] = [];
  ipn.on('error', ({ error }) => void errors.push(error.code));
  ipn.on('notification', () => {
    throw new Error('ledger down');
  });
  // The router's own emitter: what a request's afterResponse runs once the notification is accepted.
  const { createServer } = await import('node:http');
  const server = createServer(ipn).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as { port: number };
  const response = await fetch(`http://127.0.0.1:${port}/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ transaction_id: 'LOG.000001', state: 'SUCCESSFUL', custom_data: 'o-1' }),
  });
  expect(response.status).toBe(200);
  for (let tries = 0; errors.length === 0 && tries < 200; tries += 1) await drain();
  await drain();
  server.close();
  await ipn.close();
  expect(errors).toEqual(['IPN_LISTENER_FAILED']);
  expect(logger.calls.some((line) => line.startsWith('error: '))).toBe(true);
  expect(unhandled.splice(0)).toEqual([]);
});
