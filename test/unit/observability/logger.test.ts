import request from 'supertest';
import { ipnRouter, type Logger } from '../../../lib/index.js';
import { guardLogger } from '../../../lib/observability/logger.js';
import { uniquePayload } from '../../helpers/payloads.js';

/** Lets pending promise reactions run, and Node report any rejection left unhandled. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 10));

describe('guardLogger', () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => void unhandled.push(reason);
  beforeAll(() => process.on('unhandledRejection', onUnhandled));
  afterAll(() => process.off('unhandledRejection', onUnhandled));
  beforeEach(() => void unhandled.splice(0));

  /** A logger whose every method returns a rejected promise, as an async log sink that fails does. */
  function rejecting(calls: string[]): Logger {
    const method = (level: string) => (_object: object, message: string) => {
      calls.push(`${level} ${message}`);
      return Promise.reject(new Error('log sink down'));
    };
    // LogFn says void; an async sink returns a promise all the same.
    const methods = {
      debug: method('debug'),
      info: method('info'),
      warn: method('warn'),
      error: method('error'),
    };
    return methods;
  }

  test('a method that returns a rejected promise leaves no unhandled rejection', async () => {
    const calls: string[] = [];
    const logger = guardLogger(rejecting(calls));

    for (const level of ['debug', 'info', 'warn', 'error'] as const) logger[level]({}, 'hello');
    await settle();

    expect(calls).toEqual(['debug hello', 'info hello', 'warn hello', 'error hello']);
    expect(unhandled).toEqual([]);
  });

  test('a method that throws, or returns a thenable whose then throws, is swallowed', async () => {
    const thenable = {
      then() {
        throw new Error('then refused');
      },
    };
    const logger = guardLogger({
      debug: () => thenable as never,
      info: () => {
        throw new Error('sink down');
      },
      warn: () => undefined,
      error: () => undefined,
    });

    expect(() => logger.debug({}, 'x')).not.toThrow();
    expect(() => logger.info({}, 'x')).not.toThrow();
    await settle();
    expect(unhandled).toEqual([]);
  });

  test('a router whose logger rejects still answers, emits, and leaves no unhandled rejection', async () => {
    const calls: string[] = [];
    const ipn = ipnRouter({ logger: rejecting(calls) });
    const errors: unknown[] = [];
    ipn.on('error', (event) => void errors.push(event));
    ipn.on('successful', () => {
      throw new Error('ledger down'); // logged at debug level: the app's error listener owns it
    });

    const invalid = await request(ipn).post('/').send({ state: 'SUCCESSFUL' }); // logged at warn level
    const valid = await request(ipn).post('/').send(uniquePayload());
    await settle();

    expect([invalid.status, valid.status]).toEqual([400, 200]);
    expect(errors).toHaveLength(1);
    expect(calls.map((call) => call.split(' ')[0])).toEqual(expect.arrayContaining(['warn', 'debug']));
    expect(unhandled).toEqual([]);
  });
});
