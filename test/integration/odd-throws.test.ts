import request from 'supertest';
import { ipnRouter, type ErrorEvent } from '../../lib/index.js';
import { oddThrownValues } from '../helpers/odd-values.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { until } from '../helpers/until.js';

describe('listeners that throw odd values', () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => void unhandled.push(reason);
  beforeAll(() => process.on('unhandledRejection', onUnhandled));
  afterAll(() => process.off('unhandledRejection', onUnhandled));
  beforeEach(() => void unhandled.splice(0));

  function setup() {
    // With an error listener the app owns its errors: the listener's failure is logged once, at debug.
    const lines: string[] = [];
    const record = (_object: object, message: string) => {
      if (message.includes('listener')) lines.push(message);
    };
    const logger = { ...quiet, error: record, debug: record };
    const ipn = ipnRouter({ logger });
    const errors: ErrorEvent[] = [];
    const credited: string[] = [];
    ipn.on('error', (event) => void errors.push(event));
    return { ipn, errors, credited, lines };
  }

  test.each(oddThrownValues())(
    'a notification listener that throws %s synchronously: the successful listeners still run, one error event',
    async (_name, value) => {
      const { ipn, errors, credited, lines } = setup();
      ipn.on('notification', () => {
        throw value;
      });
      ipn.on('successful', (n) => void credited.push(n.transaction_id));
      const payload = uniquePayload();

      const response = await request(ipn).post('/').send(payload);

      expect(response.status).toBe(200);
      expect(credited).toEqual([payload.transaction_id]);
      expect(errors).toHaveLength(1);
      expect(errors[0]?.error.code).toBe('IPN_LISTENER_FAILED');
      expect(errors[0]?.error.cause).toBe(value);
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^a listener of 'notification' failed: /);
    },
  );

  test.each(oddThrownValues())(
    'a successful listener whose promise rejects with %s: an error event, no unhandled rejection',
    async (_name, value) => {
      const { ipn, errors, credited } = setup();
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the odd value is the point
      ipn.on('successful', () => Promise.reject(value));
      ipn.on('successful', (n) => void credited.push(n.transaction_id));

      const response = await request(ipn).post('/').send(uniquePayload());
      await until(() => errors.length > 0, 'the error event');
      await new Promise((resolve) => setImmediate(resolve));

      expect(response.status).toBe(200);
      expect(credited).toHaveLength(1);
      expect(errors).toHaveLength(1);
      expect(errors[0]?.error.cause).toBe(value);
      expect(unhandled).toEqual([]);
    },
  );
});
