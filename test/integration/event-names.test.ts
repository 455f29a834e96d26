import request from 'supertest';
import { ipnRouter } from '../../lib/index.js';
import { failedPayload, uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';

describe('event names on a real router', () => {
  test("ipn.on('success') from plain JavaScript throws a TypeError naming the known events", () => {
    const ipn: any = ipnRouter({ acknowledgeUnprotected: true, logger: quiet });
    expect(() => ipn.on('success', () => {})).toThrow(
      new TypeError(
        "ipn.on('success'): the router emits no such event (did you mean 'successful'?); the events are " +
          "'successful', 'failed', 'notification', 'duplicate', 'invalid', 'error', 'rejected', 'stale', 'dead', 'conflict', 'alert'",
      ),
    );
    expect(() => ipn.once('SUCCESSFUL', () => {})).toThrow(/did you mean 'successful'/);
    expect(() => ipn.addListener('paid', () => {})).toThrow(TypeError);
    expect(() => ipn.prependListener('success', () => {})).toThrow(TypeError);
    expect(ipn.eventNames()).toEqual([]);
  });

  test('the known names still chain, prependListener included', () => {
    const ipn = ipnRouter({ acknowledgeUnprotected: true, logger: quiet });
    expect(
      ipn
        .on('successful', () => {})
        .prependListener('failed', () => {})
        .listenerCount('failed'),
    ).toBe(1);
  });
});

describe('a final state emitted with no listener for it (at-most-once)', () => {
  function setup() {
    const warnings: Array<[Record<string, unknown>, string]> = [];
    const logger = {
      ...quiet,
      warn: (object: Record<string, unknown>, message: string) => void warnings.push([object, message]),
    };
    const ipn = ipnRouter({ acknowledgeUnprotected: true, logger });
    return { ipn, warnings };
  }

  test('a SUCCESSFUL with no successful listener logs one warning naming the listener to add', async () => {
    const { ipn, warnings } = setup();
    ipn.on('notification', () => {}); // not a listener of the state
    const payload = uniquePayload();

    const response = await request(ipn).post('/').send(payload);

    expect(response.status).toBe(200);
    expect(warnings).toEqual([
      [
        { transaction_id: payload.transaction_id, state: 'SUCCESSFUL' },
        "a SUCCESSFUL notification was emitted with no 'successful' listener: it was acknowledged and the " +
          "service will not send it again. Add ipn.on('successful', ...) before the router serves requests",
      ],
    ]);
  });

  test('a FAILED with only a successful listener warns about failed; a heard state does not warn', async () => {
    const { ipn, warnings } = setup();
    ipn.on('successful', () => {});

    await request(ipn).post('/').send(uniquePayload());
    await request(ipn)
      .post('/')
      .send(failedPayload({ transaction_id: 'EFB.424242' }));

    expect(warnings.map(([, message]) => message.split(':')[0])).toEqual([
      "a FAILED notification was emitted with no 'failed' listener",
    ]);
  });

  test('a non-final state, or a resend, never warns of a missing listener', async () => {
    const { ipn, warnings } = setup();
    const payload = uniquePayload({ state: 'PENDING' });

    await request(ipn).post('/').send(payload);
    await request(ipn).post('/').send(payload);

    // Only the unknown-state warning of its first delivery (docs/options-and-events.md), none for the resend.
    expect(warnings).toEqual([
      [
        { transaction_id: payload.transaction_id, state: 'PENDING' },
        expect.stringContaining('neither SUCCESSFUL nor FAILED'),
      ],
    ]);
  });
});
