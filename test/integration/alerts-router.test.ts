import {
  ipnNotificationSchema,
  ipnRouter,
  StatusQueryError,
  type AlertEvent,
  type StatusSource,
} from 'ipn-kit';
import { successfulPayload, uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

const serve = servedRouters();
const brief = (events: AlertEvent[]) => events.map((e) => `${e.kind} ${e.state} ${e.count}`);

describe('alerts on a real router', () => {
  test('a burst of requests with a wrong IPN address token fires forged once, after the fifth', async () => {
    const ipn = ipnRouter({ logger: quiet, secret: 'a-secret-of-24-characters' });
    const alerts: AlertEvent[] = [];
    ipn.on('alert', (event) => void alerts.push(event));
    const { url } = await serve(ipn);
    const forge = () =>
      fetch(`${url}/?token=wrong`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(uniquePayload()),
      }).then((response) => response.status);
    for (let i = 0; i < 4; i += 1) expect(await forge()).toBe(401);
    expect(alerts).toEqual([]);
    expect(await forge()).toBe(401);
    await until(() => alerts.length === 1, 'the forged alert');
    for (let i = 0; i < 5; i += 1) expect(await forge()).toBe(401);
    expect(brief(alerts)).toEqual(['forged firing 5']);
    expect(alerts[0]?.message).toBe('5 notifications answered 401 or rejected as forged in 60 s');
  });

  test('a status query the service blocks fires status_refused; the next answered query resolves it', async () => {
    let blocked = true;
    const statusClient: StatusSource = {
      getStatus: (id) =>
        blocked
          ? Promise.reject(
              new StatusQueryError(id, 'the service answered 429', {
                retryable: true,
                blocked: true,
                httpStatus: 429,
              }),
            )
          : Promise.resolve(ipnNotificationSchema.parse(successfulPayload({ transaction_id: id }))),
    };
    const ipn = ipnRouter({ logger: quiet, statusClient });
    ipn.on('successful', () => {});
    const alerts: AlertEvent[] = [];
    ipn.on('alert', (event) => void alerts.push(event));
    await expect(ipn.reconcile('EFB.1')).rejects.toBeInstanceOf(StatusQueryError);
    await expect(ipn.reconcile('EFB.1')).rejects.toBeInstanceOf(StatusQueryError);
    expect(brief(alerts)).toEqual(['status_refused firing 1']);
    expect(alerts[0]?.lastError).toMatch(/429/);
    blocked = false;
    await expect(ipn.reconcile('EFB.1')).resolves.toMatchObject({ emitted: true });
    expect(brief(alerts)).toEqual(['status_refused firing 1', 'status_refused resolved 2']);
    await ipn.close();
  });

  test('an alert listener that throws is an error event; the request is answered as ever', async () => {
    const ipn = ipnRouter({ logger: quiet, secret: 'a-secret-of-24-characters', alerts: { forgedBurst: 1 } });
    const errors: Error[] = [];
    ipn.on('error', (event) => void errors.push(event.error));
    ipn.on('alert', () => {
      throw new Error('the pager is down');
    });
    const { url } = await serve(ipn);
    const response = await fetch(`${url}/?token=wrong`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(uniquePayload()),
    });
    expect(response.status).toBe(401);
    await until(() => errors.length === 1, 'the error event');
    expect(errors[0]?.message).toMatch(/the pager is down/);
  });
});
