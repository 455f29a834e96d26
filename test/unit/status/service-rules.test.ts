import { createStatusClient, StatusRateLimitError } from '../../../lib/index.js';
import { waitFromMessage } from '../../../lib/status/wait-message.js';
import { successfulPayload } from '../../helpers/payloads.js';
import { quiet } from '../../helpers/quiet-logger.js';

const BASE = 'https://api.example.com/api_v1/transaction';
const ID = 'EFB.001158';
const MINUTE = 60_000;

function reply(body: unknown, status = 200): Response {
  return new Response(typeof body === 'string' ? body : JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json' },
  });
}

/** Answers with `responses` in turn, then repeats the last one; counts the requests. */
function answersInTurn(...responses: Array<() => Response>) {
  let call = 0;
  return jest.fn(() => {
    const next = responses[Math.min(call, responses.length - 1)] as () => Response;
    call += 1;
    return Promise.resolve(next());
  });
}

const pending = () =>
  reply({ data: successfulPayload({ state: 'PENDING1' }), message: '', statut_code: 200 });

async function refusalOf(promise: Promise<unknown>): Promise<StatusRateLimitError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(StatusRateLimitError);
  return error as StatusRateLimitError;
}

describe("the status client's defaults follow the service's rules", () => {
  beforeEach(() => jest.useFakeTimers({ doNotFake: ['nextTick', 'queueMicrotask', 'setImmediate'] }));
  afterEach(() => jest.useRealTimers());

  test('by default, one transaction is asked at most once per 15 minutes (a non-final answer is reused)', async () => {
    const fetch = answersInTurn(pending);
    const client = createStatusClient({ baseUrl: BASE, apiKey: 'k', fetch, logger: quiet });

    await client.getStatus(ID);
    jest.advanceTimersByTime(14 * MINUTE + 59_000);
    expect((await client.getStatus(ID)).state).toBe('PENDING1');
    expect(fetch).toHaveBeenCalledTimes(1);
    jest.advanceTimersByTime(1_000);
    await client.getStatus(ID);
    expect(fetch).toHaveBeenCalledTimes(2);
  });

  test.each([
    [
      'HTTP 429 with a JSON message',
      () => reply({ message: 'Trop de requêtes : réessayez dans 40 minutes' }, 429),
    ],
    ['HTTP 429 with a text message', () => reply('Too many requests. Retry in 40 min.', 429)],
    [
      'statut_code 429 in an HTTP 200',
      () => reply({ data: [], message: 'rate limit exceeded, wait 2400 seconds', statut_code: 429 }),
    ],
  ])(
    '%s: nothing is sent for the wait the message gives (40 min, beyond the 15-min cool-down)',
    async (_case, answer) => {
      const fetch = answersInTurn(answer, () =>
        reply({ data: successfulPayload({ transaction_id: 'EFB.000002' }), message: '', statut_code: 200 }),
      );
      const client = createStatusClient({ baseUrl: BASE, apiKey: 'k', fetch, logger: quiet, retries: 0 });

      await expect(client.getStatus(ID)).rejects.toMatchObject({ blocked: true });
      jest.advanceTimersByTime(39 * MINUTE);
      const refusal = await refusalOf(client.getStatus('EFB.000002'));
      expect(refusal.reason).toBe('blocked');
      expect(refusal.retryAfterMs).toBe(MINUTE);
      expect(fetch).toHaveBeenCalledTimes(1);
      jest.advanceTimersByTime(MINUTE);
      await client.getStatus('EFB.000002');
      expect(fetch).toHaveBeenCalledTimes(2);
    },
  );

  test('a 429 whose message gives no wait keeps the 15-minute cool-down', async () => {
    const fetch = answersInTurn(() => reply('Too Many Requests', 429));
    const client = createStatusClient({ baseUrl: BASE, apiKey: 'k', fetch, logger: quiet, retries: 0 });
    await expect(client.getStatus(ID)).rejects.toMatchObject({ blocked: true });
    const refusal = await refusalOf(client.getStatus('EFB.000002'));
    expect(refusal.retryAfterMs).toBe(15 * MINUTE);
  });
});

describe('waitFromMessage', () => {
  test.each([
    ['Retry in 15 minutes', 15 * MINUTE],
    ['réessayez dans 900 secondes', 900_000],
    ['Veuillez patienter 2 heures', 2 * 3_600_000],
    ['wait 1,5 min', 90_000],
    ['{"message":"slow down","retry_after":120}', 120_000],
    ['Too Many Requests', 0],
    ['', 0],
    ['try again in 400 days', 24 * 60 * MINUTE],
  ])('%p -> %p ms', (text, ms) => {
    expect(waitFromMessage(text)).toBe(ms);
  });
});
