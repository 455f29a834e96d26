import { fastParse, ipnNotificationSchema, parseNotification } from '../../../lib/notification/schema.js';
import { failedPayload, successfulPayload } from '../../helpers/payloads.js';
import docSuccess from '../../fixtures/ipn-doc-success.json';
import docSuccessful from '../../fixtures/ipn-doc-successful.json';

/** A deterministic generator (mulberry32), so that a failing case is the same on every run. */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Values any field may hold: every type zod's conversions tell apart, and the odd ones. */
const VALUES: unknown[] = [
  undefined,
  null,
  '',
  '0',
  ' 12.50 ',
  '-3',
  '1e3',
  'abc',
  0,
  -0,
  12.5,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  2 ** 60,
  true,
  false,
  {},
  { orderId: 'o-1' },
  [1, 2],
];
const IDS: unknown[] = [
  'EFB.001158',
  'PIX_22827809',
  'a:b-c',
  '',
  ' EFB.1',
  'x'.repeat(129),
  42,
  null,
  undefined,
];
const STATES: unknown[] = [
  'SUCCESSFUL',
  'FAILED',
  'SUCCESS',
  'PENDING',
  'pending 1',
  'constructor',
  '__proto__',
  '',
  7,
  null,
  undefined,
];
const FIELDS = [
  'custom_data',
  'amount',
  'benefice',
  'commission',
  'comission',
  'fee',
  'destination',
  'response',
  'reponse',
  'error',
  'service_id',
  'customer_name',
  'ipn_url',
  'provider_id',
  'sms_link',
  'created_at',
  'updated_at',
  'ipn_state',
  'w_amount_after_transaction',
  'p_last_wallet_amount',
  'p_new_wallet_amount',
  'p_id',
  'hash',
  'currency',
  'transaction_channel',
  'rawState',
  'customData',
  'toString',
  '1',
];

function pick<T>(next: () => number, items: readonly T[]): T {
  return items[Math.floor(next() * items.length)]!;
}

/** A record with random values in random fields, its keys in a random order. */
function randomRecord(next: () => number): Record<string, unknown> {
  const entries: Array<[string, unknown]> = [];
  if (next() < 0.95) entries.push(['transaction_id', pick(next, IDS)]);
  if (next() < 0.95) entries.push(['state', pick(next, STATES)]);
  for (const field of FIELDS) if (next() < 0.4) entries.push([field, pick(next, VALUES)]);
  for (let i = entries.length - 1; i > 0; i -= 1) {
    const j = Math.floor(next() * (i + 1));
    [entries[i], entries[j]] = [entries[j]!, entries[i]!];
  }
  return Object.fromEntries(entries);
}

/** zod's answer and the router's, comparable: the value with its keys in order, or the issues. */
function both(input: unknown) {
  const shape = (result: ReturnType<typeof parseNotification>) =>
    result.success
      ? {
          success: true,
          keys: Object.keys(result.data),
          extraKeys: Object.keys(result.data.extra),
          data: result.data,
        }
      : { success: false, issues: result.error.issues };
  return { zod: shape(ipnNotificationSchema.safeParse(input)), router: shape(parseNotification(input)) };
}

describe('parseNotification (the fast path of validation)', () => {
  it.each([
    ['the SUCCESSFUL fixture', successfulPayload()],
    ['the FAILED fixture', failedPayload()],
    ["the service's documented SUCCESS sample", docSuccess],
    ["the service's documented SUCCESSFUL sample", docSuccessful],
  ])('gives zod’s value, keys in the same order, for %s', (_name, payload) => {
    const { zod, router } = both(payload);
    expect(zod.success).toBe(true);
    expect(router).toEqual(zod);
  });

  it('takes the fast path for the common shape (a valid notification with unknown fields)', () => {
    const notification = fastParse({ ...successfulPayload(), currency: 'XOF' });
    expect(notification).toMatchObject({ transaction_id: 'EFB.001158', extra: { currency: 'XOF' } });
  });

  it('leaves to zod every input zod refuses', () => {
    for (const input of [
      null,
      'text',
      [successfulPayload()],
      { ...successfulPayload(), transaction_id: 42 },
      { ...successfulPayload(), state: 'not a state' },
      { ...successfulPayload(), custom_data: 2 ** 60 },
    ]) {
      expect(fastParse(input)).toBeUndefined();
      const { zod, router } = both(input);
      expect(zod.success).toBe(false);
      expect(router).toEqual(zod);
    }
  });

  it('reads the other spellings in place as zod reads its copy, whatever the record inherits', () => {
    // `comission` fills an empty `commission`; a `reponse` never replaces the `response` that is there.
    const misspelt = { ...successfulPayload(), commission: '', reponse: 'ok', currency: 'XOF' };
    const inheriting = Object.assign(Object.create({ amount: 7, currency: 'EUR' }) as object, misspelt);
    const bare = Object.assign(Object.create(null) as object, misspelt);
    for (const input of [misspelt, inheriting, bare]) {
      const { zod, router } = both(input);
      expect(zod.success).toBe(true);
      expect(router).toEqual(zod);
    }
    expect(fastParse(misspelt)).toMatchObject({
      commission: 75,
      response: 'operation success',
      extra: { currency: 'XOF' },
    });
    expect(fastParse(misspelt)?.extra).not.toHaveProperty('reponse');
  });

  it('agrees with zod on 3000 random records: every value, every key order, every issue', () => {
    const next = random(27);
    let fast = 0;
    for (let index = 0; index < 3000; index += 1) {
      const input = randomRecord(next);
      const { zod, router } = both(input);
      expect({ input, result: router }).toEqual({ input, result: zod });
      if (fastParse(input) !== undefined) fast += 1;
    }
    // The comparison covers the fast path, not only zod's fallback.
    expect(fast).toBeGreaterThan(200);
  });
});
