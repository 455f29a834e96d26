import { ipnNotificationSchema, toRecord } from '../../../lib/notification/schema.js';
import { failedPayload, successfulPayload } from '../../helpers/payloads.js';

function parse(payload: Record<string, unknown>) {
  return ipnNotificationSchema.safeParse(payload);
}

/** Parses a payload that must be accepted and returns the notification. */
function accept(payload: Record<string, unknown>) {
  const result = parse(payload);
  if (!result.success) throw new Error(`expected the payload to be accepted: ${result.error.message}`);
  return result.data as unknown as Record<string, unknown>;
}

/** The paths of the fields a payload is rejected for. */
function rejectedPaths(payload: Record<string, unknown>): string[] {
  const result = parse(payload);
  if (result.success) throw new Error('expected the payload to be rejected');
  return result.error.issues.map((issue) => issue.path.join('.'));
}

function without(payload: Record<string, unknown>, key: string): Record<string, unknown> {
  const copy = { ...payload };
  delete copy[key];
  return copy;
}

describe('ipnNotificationSchema', () => {
  describe('the fixtures', () => {
    it('accepts the real-shaped SUCCESSFUL notification', () => {
      const notification = accept(successfulPayload());
      expect(notification).toMatchObject({
        transaction_id: 'EFB.001158',
        state: 'SUCCESSFUL',
        custom_data: '{"orderId":"order-1001"}',
        amount: 5000,
        commission: 75,
        p_id: 7,
        p_last_wallet_amount: 125000,
        p_new_wallet_amount: null,
        hash: '',
      });
    });

    it('accepts the real-shaped FAILED notification with numbers as strings and nulls', () => {
      const notification = accept(failedPayload());
      expect(notification).toMatchObject({
        transaction_id: 'PIX_22827809',
        state: 'FAILED',
        custom_data: 'order-1002',
        amount: 2500,
        benefice: 0,
        commission: 0,
        fee: 0,
        service_id: 3,
        sms_link: null,
        w_amount_after_transaction: '',
        hash: '',
        response: 'operation success',
        error: 'insufficient balance',
      });
    });
  });

  describe('unknown fields named after Object.prototype members', () => {
    test.each(Object.getOwnPropertyNames(Object.prototype))('%s is dropped, like __proto__', (name) => {
      const payload = JSON.parse(
        JSON.stringify(successfulPayload({ extra_field: 1 })).replace(/}$/, `,${JSON.stringify(name)}:"x"}`),
      ) as Record<string, unknown>;
      expect(Object.hasOwn(payload, name)).toBe(true);

      const notification = accept(payload);
      const extra = notification.extra as Record<string, unknown>;

      expect(Object.hasOwn(notification, name)).toBe(false);
      expect(Object.hasOwn(extra, name)).toBe(false); // not under extra either: String(n.extra) works too
      expect(extra.extra_field).toBe(1); // other unknown fields are kept, under extra
      // eslint-disable-next-line @typescript-eslint/no-base-to-string -- partner code does this
      expect(String(notification)).toBe('[object Object]');
    });
  });

  describe('commission spelling', () => {
    it('exposes the service spelling comission as commission only', () => {
      const notification = accept(successfulPayload({ comission: 75 }));
      expect(notification.commission).toBe(75);
      expect(Object.hasOwn(notification, 'comission')).toBe(false);
    });

    it('exposes the correct spelling commission as commission', () => {
      const notification = accept(without(successfulPayload({ commission: 12 }), 'comission'));
      expect(notification.commission).toBe(12);
      expect(Object.hasOwn(notification, 'comission')).toBe(false);
    });

    it.each([[null], ['']])('falls back to comission when commission is %p (nothing)', (nothing) => {
      expect(accept(successfulPayload({ commission: nothing, comission: 75 })).commission).toBe(75);
    });

    it('prefers commission over comission when both are present', () => {
      const notification = accept(successfulPayload({ comission: 75, commission: 80 }));
      expect(notification.commission).toBe(80);
      expect(Object.hasOwn(notification, 'comission')).toBe(false);
    });

    it('reads a comission given as a string as a number', () => {
      expect(accept(successfulPayload({ comission: '75.5' })).commission).toBe(75.5);
    });
  });

  describe('informational fields (lenient)', () => {
    it('turns numbers sent as strings into numbers', () => {
      const notification = accept(
        successfulPayload({ amount: '5000', fee: '0', p_id: '7', service_id: '12', benefice: '-1.25' }),
      );
      expect(notification).toMatchObject({ amount: 5000, fee: 0, p_id: 7, service_id: 12, benefice: -1.25 });
    });

    it.each([
      ['null', null],
      ['an empty string', ''],
    ])('reads %s in a number field as null', (_, value) => {
      const notification = accept(
        successfulPayload({ amount: value, fee: value, p_last_wallet_amount: value }),
      );
      expect(notification).toMatchObject({ amount: null, fee: null, p_last_wallet_amount: null });
    });

    it('reads a missing number field as null', () => {
      const notification = accept(without(without(successfulPayload(), 'amount'), 'sms_link'));
      expect(notification.amount).toBeNull();
      expect(notification.sms_link).toBeNull();
    });

    it.each([
      ['null', null],
      ['an empty string', ''],
    ])('reads %s in a text field as an empty string', (_, value) => {
      const notification = accept(
        successfulPayload({ error: value, response: value, hash: value, w_amount_after_transaction: value }),
      );
      expect(notification).toMatchObject({
        error: '',
        response: '',
        hash: '',
        w_amount_after_transaction: '',
      });
    });

    it('reads a missing text field as an empty string', () => {
      const notification = accept(without(without(successfulPayload(), 'hash'), 'customer_name'));
      expect(notification.hash).toBe('');
      expect(notification.customer_name).toBe('');
    });

    it.each([
      ['amount', 'abc'],
      ['fee', '12abc'],
      ['amount', { value: 5000 }],
      ['amount', [5000]],
      ['amount', true],
      ['p_id', '1e3x'],
    ])('never rejects for an unreadable %s (%p): it becomes null', (field, value) => {
      expect(accept(successfulPayload({ [field]: value }))[field]).toBeNull();
    });

    it('never rejects for an unreadable text field: it becomes an empty string', () => {
      const notification = accept(successfulPayload({ error: { code: 1 }, response: ['ok'] }));
      expect(notification.error).toBe('');
      expect(notification.response).toBe('');
    });

    it('keeps extra fields the interface does not list, under extra and only there', () => {
      const notification = accept(successfulPayload({ currency: 'XOF', transaction_channel: 'wave' }));
      expect(notification.extra).toEqual({ currency: 'XOF', transaction_channel: 'wave' });
      expect(notification).not.toHaveProperty('currency');
      expect(notification).not.toHaveProperty('transaction_channel');
    });

    it('keeps the extra fields of the FAILED fixture under extra', () => {
      const notification = accept(failedPayload());
      expect(notification.extra).toEqual({ currency: 'XOF', transaction_channel: 'wave' });
    });

    it('gives an empty extra when every field is listed, and never puts a listed field in it', () => {
      const notification = accept(successfulPayload());
      expect(notification.extra).toEqual({});
      expect(accept(successfulPayload({ comission: 5, commission: undefined })).extra).toEqual({});
    });

    it('keeps a payload field named extra as an extra field, not as the extra object', () => {
      const notification = accept(successfulPayload({ extra: { currency: 'XOF' } }));
      expect(notification.extra).toEqual({ extra: { currency: 'XOF' } });
    });

    it('gives the same notification when its stored record (toRecord) is parsed again', () => {
      const first = ipnNotificationSchema.parse(successfulPayload({ currency: 'XOF', extra: 1 }));
      const record = toRecord(first);
      expect(record).toMatchObject({ currency: 'XOF', extra: 1, transaction_id: first.transaction_id });
      expect(ipnNotificationSchema.parse(record)).toEqual(first);
    });

    it('keeps the state as received in the stored record, so a SUCCESS parsed again keeps its rawState', () => {
      const first = ipnNotificationSchema.parse(successfulPayload({ state: 'SUCCESS', currency: 'XOF' }));
      expect(first).toMatchObject({ state: 'SUCCESSFUL', rawState: 'SUCCESS', extra: { currency: 'XOF' } });
      const record = toRecord(first);
      expect(record.state).toBe('SUCCESS');
      expect(record).not.toHaveProperty('rawState');
      expect(ipnNotificationSchema.parse(record)).toEqual(first);
      expect(
        ipnNotificationSchema.parse(toRecord(ipnNotificationSchema.parse(successfulPayload()))),
      ).not.toHaveProperty('rawState');
    });
  });

  describe('transaction_id (exact)', () => {
    it.each(['EFB.001158', 'PIX_22827809'])('accepts the id shape %s unchanged', (id) => {
      expect(accept(successfulPayload({ transaction_id: id })).transaction_id).toBe(id);
    });

    it('accepts an id of 128 characters', () => {
      const id = `A${'1'.repeat(127)}`;
      expect(accept(successfulPayload({ transaction_id: id })).transaction_id).toBe(id);
    });

    it.each([
      ['a number', 1158],
      ['an empty string', ''],
      ['a string with spaces', 'EFB 001158'],
      ['a string with a leading space', ' EFB.001158'],
      ['too long (129 characters)', `A${'1'.repeat(128)}`],
      ['null', null],
      ['an object', { id: 'EFB.001158' }],
    ])('rejects a transaction_id that is %s', (_, value) => {
      expect(rejectedPaths(successfulPayload({ transaction_id: value }))).toContain('transaction_id');
    });

    it('rejects a missing transaction_id', () => {
      expect(rejectedPaths(without(successfulPayload(), 'transaction_id'))).toContain('transaction_id');
    });
  });

  describe('informational fields: edge values', () => {
    it('reads a decimal string with spaces around it', () => {
      expect(accept(successfulPayload({ amount: ' 1500 ' })).amount).toBe(1500);
    });

    it('keeps a boolean text field as its text', () => {
      expect(accept(successfulPayload({ error: false })).error).toBe('false');
    });

    it.each([[7], ['P-7']])('keeps a provider_id of %p as it came', (value) => {
      expect(accept(successfulPayload({ provider_id: value })).provider_id).toBe(value);
    });
  });

  describe('state (exact)', () => {
    it('accepts a state of 32 characters and refuses one of 33', () => {
      expect(accept(successfulPayload({ state: 'S'.repeat(32) })).state).toHaveLength(32);
      expect(rejectedPaths(successfulPayload({ state: 'S'.repeat(33) }))).toContain('state');
    });

    // A state named like a property of every object is a state like any other, never an alias.
    it.each(['SUCCESSFUL', 'FAILED', 'PENDING', 'PENDING1', 'constructor', 'toString', '__proto__'])(
      'accepts the state %s unchanged',
      (state) => {
        expect(accept(successfulPayload({ state })).state).toBe(state);
      },
    );

    it('accepts a lowercase successful but keeps it lowercase, so it is never SUCCESSFUL', () => {
      const notification = accept(successfulPayload({ state: 'successful' }));
      expect(notification.state).toBe('successful');
      expect(notification.state).not.toBe('SUCCESSFUL');
    });

    it('rejects a missing state', () => {
      expect(rejectedPaths(without(successfulPayload(), 'state'))).toContain('state');
    });

    it.each([
      ['a number', 1],
      ['an empty string', ''],
      ['a string with spaces', 'SUCCESS FUL'],
      ['a string with a trailing space', 'SUCCESSFUL '],
      ['null', null],
      ['an array', ['SUCCESSFUL']],
    ])('rejects a state that is %s', (_, value) => {
      expect(rejectedPaths(successfulPayload({ state: value }))).toContain('state');
    });
  });

  describe('custom_data (as received, as text)', () => {
    it('keeps a string exactly as received, without trimming', () => {
      expect(accept(successfulPayload({ custom_data: '  a ' })).custom_data).toBe('  a ');
    });

    it('keeps JSON text as the string received', () => {
      const text = '{ "orderId" : "order-1001" }';
      expect(accept(successfulPayload({ custom_data: text })).custom_data).toBe(text);
    });

    it('turns a number into its string', () => {
      expect(accept(successfulPayload({ custom_data: 42 })).custom_data).toBe('42');
    });

    it('turns null into an empty string', () => {
      expect(accept(successfulPayload({ custom_data: null })).custom_data).toBe('');
    });

    it('reads a missing custom_data as an empty string: the payment is not refused over partner data', () => {
      expect(accept(without(successfulPayload(), 'custom_data')).custom_data).toBe('');
    });

    it.each([
      ['an object', { orderId: 'order-1001' }, '{"orderId":"order-1001"}'],
      ['an array', ['order-1001'], '["order-1001"]'],
      ['a boolean', true, 'true'],
      ['a decimal number', 12.5, '12.5'],
      ['the largest exact integer', Number.MAX_SAFE_INTEGER, '9007199254740991'],
    ])('turns a custom_data that is %s into its text', (_, value, text) => {
      expect(accept(successfulPayload({ custom_data: value })).custom_data).toBe(text);
    });

    it('rejects an integer too large to have been read exactly, which could name another order', () => {
      const result = ipnNotificationSchema.safeParse(successfulPayload({ custom_data: 2 ** 53 + 2 }));
      expect(result.success).toBe(false);
      expect(result.error?.issues[0]).toMatchObject({
        path: ['custom_data'],
        message: expect.stringContaining('send it as a string'),
      });
    });

    it.each([
      ['customData', successfulPayload({ customData: { orderId: 'someone-else' } })],
      ['customDataError', successfulPayload({ customDataError: 'forged' })],
      ['customDataError, with comission', successfulPayload({ customDataError: 'forged', comission: 1 })],
      [
        'customDataError, without comission',
        without(successfulPayload({ customDataError: 'forged' }), 'comission'),
      ],
    ])("drops %s sent in the payload: it is ipn-kit's own", (_case, payload) => {
      const parsed = accept(payload);
      expect(Object.hasOwn(parsed, 'customData')).toBe(false);
      expect(Object.hasOwn(parsed, 'customDataError')).toBe(false);
    });
  });

  it('rejects a body that is not an object', () => {
    expect(ipnNotificationSchema.safeParse(['EFB.001158']).success).toBe(false);
    expect(ipnNotificationSchema.safeParse(null).success).toBe(false);
  });
});
