import { StatusError, StatusQueryError, TransactionNotFoundError } from '../../../lib/shared/errors.js';
import { lackingFields, parseStatusAnswer } from '../../../lib/status/status-envelope.js';
import type { StatusRecord } from '../../../lib/status/status-envelope.js';
import { successfulPayload } from '../../helpers/payloads.js';

const ID = 'EFB.001158';

/** A status-response record: the IPN record without the IPN-only fields, `hash` null as in the sample. */
function statusRecord(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const { response, sms_link, ipn_state, w_amount_after_transaction, ...record }: Record<string, unknown> =
    successfulPayload({ hash: null, p_last_wallet_amount: null });
  return { ...record, ...overrides };
}

/** The answer to a status query: an envelope (or any value) as the JSON body, HTTP 200 unless told. */
function answer(body: unknown, httpStatus = 200) {
  return { httpStatus, body: typeof body === 'string' ? body : JSON.stringify(body) };
}

/** Parses an answer that must be a record. */
function recordOf(body: unknown, httpStatus = 200, id = ID): StatusRecord {
  const result = parseStatusAnswer(id, answer(body, httpStatus));
  if (result instanceof Error) throw new Error(`expected a record, got ${result.name}: ${result.message}`);
  return result;
}

/** Parses an answer that must be a StatusQueryError. */
function queryErrorOf(body: unknown, httpStatus = 200, id = ID): StatusQueryError {
  const result = parseStatusAnswer(id, answer(body, httpStatus));
  if (!(result instanceof StatusQueryError)) {
    const got = result instanceof Error ? result.name : `a record of ${result.transaction_id}`;
    throw new Error(`expected a StatusQueryError, got ${got}`);
  }
  return result;
}

describe('parseStatusAnswer', () => {
  describe('the shape of data', () => {
    it('reads data as one record, with the service spelling comission as commission', () => {
      const record = recordOf({ data: statusRecord(), message: '', statut_code: 200 });
      expect(record).toMatchObject({
        transaction_id: ID,
        state: 'SUCCESSFUL',
        amount: 5000,
        commission: 75,
        custom_data: '{"orderId":"order-1001"}',
        p_id: 7,
        hash: '',
        p_last_wallet_amount: null,
        response: '',
        sms_link: null,
      });
      expect(Object.hasOwn(record, 'comission')).toBe(false);
    });

    it('picks the record of the asked id among several in an array', () => {
      const data = [
        statusRecord({ transaction_id: 'EFB.000001', amount: 1, state: 'FAILED' }),
        statusRecord({ transaction_id: ID, amount: 5000 }),
        statusRecord({ transaction_id: 'EFB.000002', amount: 2 }),
      ];
      const record = recordOf({ data, message: '', statut_code: 200 });
      expect(record.transaction_id).toBe(ID);
      expect(record.amount).toBe(5000);
      expect(record.state).toBe('SUCCESSFUL');
    });

    it('reads an array holding one record of the asked id', () => {
      const record = recordOf({ data: [statusRecord()], statut_code: 200 });
      expect(record.transaction_id).toBe(ID);
      expect(record.amount).toBe(5000);
    });

    it('reads a partial record: missing numbers become null and missing text ""', () => {
      const record = recordOf({
        data: { transaction_id: ID, state: 'SUCCESSFUL', amount: 5000 },
        statut_code: 200,
      });
      expect(record).toMatchObject({
        transaction_id: ID,
        state: 'SUCCESSFUL',
        amount: 5000,
        custom_data: '',
        commission: null,
        fee: null,
        benefice: null,
        service_id: null,
        p_id: null,
        provider_id: null,
        destination: '',
        customer_name: '',
        error: '',
        hash: '',
        created_at: '',
      });
    });

    it('takes a record without transaction_id as the one asked about', () => {
      const record = recordOf(
        { data: { state: 'FAILED', amount: 2500 }, statut_code: 200 },
        200,
        'PIX_22827809',
      );
      expect(record.transaction_id).toBe('PIX_22827809');
      expect(record.state).toBe('FAILED');
      expect(record.amount).toBe(2500);
    });

    it('takes an array whose only record lacks transaction_id as the one asked about', () => {
      const record = recordOf({ data: [{ state: 'SUCCESSFUL', amount: 10 }], statut_code: 200 });
      expect(record.transaction_id).toBe(ID);
      expect(record.amount).toBe(10);
    });

    it('never answers with the record of another id: an array of one such record is a StatusQueryError', () => {
      const error = queryErrorOf({
        data: [statusRecord({ transaction_id: 'EFB.999999' })],
        message: '',
        statut_code: 200,
      });
      expect(error.transactionId).toBe(ID);
      expect(error.retryable).toBe(false);
      expect(error.statutCode).toBe(200);
      expect(error.message).toContain('no usable record');
    });

    it('never answers with the record of another id given as one object', () => {
      const error = queryErrorOf({ data: statusRecord({ transaction_id: 'EFB.999999' }), statut_code: 200 });
      expect(error.transactionId).toBe(ID);
      expect(error.retryable).toBe(false);
    });

    it('is a StatusQueryError when the record has no state', () => {
      const { state, ...stateless } = statusRecord();
      const error = queryErrorOf({ data: stateless, statut_code: 200 });
      expect(error.code).toBe('IPN_STATUS_QUERY_FAILED');
      expect(error.retryable).toBe(false);
      expect(error.httpStatus).toBe(200);
    });

    it('is a StatusQueryError when data is missing', () => {
      expect(queryErrorOf({ message: '', statut_code: 200 }).retryable).toBe(false);
    });

    it('gives a custom_data that came back as a number as its text', () => {
      expect(recordOf({ data: statusRecord({ custom_data: 1234 }), statut_code: 200 }).custom_data).toBe(
        '1234',
      );
    });

    it('keeps the correct spelling commission too', () => {
      const { comission, ...rest } = statusRecord();
      expect(recordOf({ data: { ...rest, commission: 12 }, statut_code: 200 }).commission).toBe(12);
    });
  });

  describe('statut_code', () => {
    it('reads statut_code 200 as a number', () => {
      expect(recordOf({ data: statusRecord(), statut_code: 200 }).state).toBe('SUCCESSFUL');
    });

    it('reads statut_code as a numeric string', () => {
      expect(recordOf({ data: statusRecord(), statut_code: '200' }).state).toBe('SUCCESSFUL');
    });

    it('reads a numeric-string statut_code 500 as a failure', () => {
      const error = queryErrorOf({ data: null, message: 'oops', statut_code: '500' });
      expect(error.statutCode).toBe(500);
      expect(error.retryable).toBe(true);
    });

    it('reads an answer with no statut_code by its data', () => {
      expect(recordOf({ data: statusRecord() }).amount).toBe(5000);
    });

    it('answers a non-final state as a record, state PENDING1', () => {
      const record = recordOf({
        data: { transaction_id: ID, state: 'PENDING1', amount: 5000 },
        statut_code: 200,
      });
      expect(record.state).toBe('PENDING1');
      expect(record.amount).toBe(5000);
    });
  });

  describe('an unknown transaction', () => {
    function expectNotFound(body: unknown, httpStatus = 200) {
      const result = parseStatusAnswer(ID, answer(body, httpStatus));
      expect(result).toBeInstanceOf(TransactionNotFoundError);
      expect(result).toBeInstanceOf(StatusError);
      const error = result as TransactionNotFoundError;
      expect(error.code).toBe('IPN_TRANSACTION_NOT_FOUND');
      expect(error.transactionId).toBe(ID);
      expect(error.name).toBe('TransactionNotFoundError');
    }

    it('is TransactionNotFoundError for the answer seen in the wild: 404, the message, data [id]', () => {
      expectNotFound({ data: [ID], message: 'transaction not found', statut_code: 404 });
    });

    it('is TransactionNotFoundError for statut_code 404 alone', () => {
      expectNotFound({ data: null, message: '', statut_code: 404 });
    });

    it('is TransactionNotFoundError for statut_code "404" as a string', () => {
      expectNotFound({ data: null, statut_code: '404' });
    });

    it('is TransactionNotFoundError for the message "transaction not found" even with statut_code 200', () => {
      expectNotFound({ data: null, message: 'Transaction not found', statut_code: 200 });
    });

    it('is TransactionNotFoundError when data holds only the id as a string', () => {
      expectNotFound({ data: ID, message: '', statut_code: 200 });
    });

    it('is TransactionNotFoundError when data is [id]', () => {
      expectNotFound({ data: [ID], message: '' });
    });

    it('is TransactionNotFoundError for an envelope answered with HTTP 404', () => {
      expectNotFound({ data: [ID], message: 'transaction not found', statut_code: 404 }, 404);
    });
  });

  describe('a failed query', () => {
    it('is a retryable StatusQueryError, never not-found, for an HTTP 503 whose body says statut_code 404', () => {
      const result = parseStatusAnswer(
        ID,
        answer({ data: [ID], message: 'transaction not found', statut_code: 404 }, 503),
      );
      expect(result).toBeInstanceOf(StatusQueryError);
      expect((result as StatusQueryError).retryable).toBe(true);
    });

    it('is a retryable StatusQueryError for statut_code 500, with what the service said', () => {
      const error = queryErrorOf({ data: null, message: 'internal error', statut_code: 500 });
      expect(error).toBeInstanceOf(StatusError);
      expect(error.code).toBe('IPN_STATUS_QUERY_FAILED');
      expect(error.transactionId).toBe(ID);
      expect(error.httpStatus).toBe(200);
      expect(error.statutCode).toBe(500);
      expect(error.serviceMessage).toBe('internal error');
      expect(error.retryable).toBe(true);
      expect(error.message).toContain('statut_code 500');
    });

    it('is a non-retryable StatusQueryError for statut_code 400', () => {
      const error = queryErrorOf({ data: null, message: 'bad request', statut_code: 400 });
      expect(error.statutCode).toBe(400);
      expect(error.serviceMessage).toBe('bad request');
      expect(error.retryable).toBe(false);
    });

    it('is a non-retryable StatusQueryError for an unexpected statut_code such as 401', () => {
      const error = queryErrorOf({ data: statusRecord(), message: 'invalid api key', statut_code: 401 });
      expect(error.statutCode).toBe(401);
      expect(error.retryable).toBe(false);
    });

    it('is a StatusQueryError for an envelope answered with HTTP 400, even holding a record', () => {
      const error = queryErrorOf({ data: statusRecord(), message: '', statut_code: 200 }, 400);
      expect(error.httpStatus).toBe(400);
      expect(error.retryable).toBe(false);
    });

    it('is a retryable StatusQueryError for an envelope answered with HTTP 502', () => {
      const error = queryErrorOf({ data: null, message: 'bad gateway' }, 502);
      expect(error.httpStatus).toBe(502);
      expect(error.statutCode).toBeUndefined();
      expect(error.serviceMessage).toBe('bad gateway');
      expect(error.retryable).toBe(true);
    });

    // An error answer is never read as a verdict on the transaction: an outage would reject a genuine
    // notification as forged ('not_found') instead of trying again later.
    it('is a retryable StatusQueryError, not not-found, for a 500 envelope whose data lists error texts', () => {
      const result = parseStatusAnswer(
        ID,
        answer({ data: ['database unavailable'], message: 'internal error', statut_code: 500 }, 500),
      );
      expect(result).toBeInstanceOf(StatusQueryError);
      expect((result as StatusQueryError).retryable).toBe(true);
    });

    // Exact about which transaction an answer is about.
    it('is not TransactionNotFoundError when data holds only another id', () => {
      const result = parseStatusAnswer(ID, answer({ data: ['EFB.999999'], message: '', statut_code: 200 }));
      expect(result).not.toBeInstanceOf(TransactionNotFoundError);
      expect(result).toBeInstanceOf(StatusQueryError);
    });

    it('is a retryable StatusQueryError for HTTP 500 with an HTML body', () => {
      const error = queryErrorOf('<html><body><h1>500 Internal Server Error</h1></body></html>', 500);
      expect(error.httpStatus).toBe(500);
      expect(error.statutCode).toBeUndefined();
      expect(error.retryable).toBe(true);
      expect(error.message).toContain('HTTP 500');
      expect(error.message).toContain('not JSON');
    });

    it('points at baseUrl for HTTP 404 with a body that is not the envelope', () => {
      const error = queryErrorOf({ error: 'Not Found', path: '/api/status' }, 404);
      expect(error.httpStatus).toBe(404);
      expect(error.retryable).toBe(false);
      expect(error.message).toContain('baseUrl');
      expect(error.message).toContain('not the status envelope');
    });

    it('points at baseUrl for HTTP 404 with an HTML body', () => {
      const error = queryErrorOf('<html>Cannot POST /status</html>', 404);
      expect(error.retryable).toBe(false);
      expect(error.message).toContain('baseUrl');
    });

    it('is a non-retryable StatusQueryError for an HTTP 200 body that is not JSON', () => {
      const error = queryErrorOf('OK', 200);
      expect(error.httpStatus).toBe(200);
      expect(error.retryable).toBe(false);
      expect(error.message).toContain('not JSON');
      expect(error.message).not.toContain('baseUrl');
    });

    it.each([['"a string"'], ['42'], ['null'], ['[1, 2]'], ['true']])(
      'is a non-retryable StatusQueryError for JSON that is not an object: %s',
      (body) => {
        const error = queryErrorOf(body, 200);
        expect(error.retryable).toBe(false);
        expect(error.message).toContain('not the status envelope');
      },
    );

    it.each([[429], [403]])(
      'is a retryable StatusQueryError for HTTP %i with a body that is not JSON',
      (status) => {
        const error = queryErrorOf('Too many requests', status);
        expect(error.httpStatus).toBe(status);
        expect(error.retryable).toBe(true);
      },
    );

    it.each([[429], [403]])('is a retryable StatusQueryError for HTTP %i with an envelope', (status) => {
      const error = queryErrorOf({ data: null, message: 'slow down', statut_code: status }, status);
      expect(error.httpStatus).toBe(status);
      expect(error.statutCode).toBe(status);
      expect(error.serviceMessage).toBe('slow down');
      expect(error.retryable).toBe(true);
    });

    it('is a retryable StatusQueryError for HTTP 429 even when the body holds a record', () => {
      const error = queryErrorOf({ data: statusRecord(), statut_code: 200 }, 429);
      expect(error.retryable).toBe(true);
    });
  });
});

describe('parseStatusAnswer: exact about which transaction, and about custom_data', () => {
  const big = '12345678901234567890';
  /** A record's JSON text with a raw custom_data value (a number JSON.parse would round). */
  const rawRecord = (id: string, customData: string) =>
    `{"transaction_id":"${id}","state":"SUCCESSFUL","amount":5000,"custom_data":${customData}}`;

  it.each([
    ['data as one record', `{"data":${rawRecord(ID, big)},"statut_code":200}`],
    [
      'the second record of an array',
      `{"statut_code":200,"data":[${rawRecord('EFB.000001', '1')}, ${rawRecord(ID, big)}]}`,
    ],
    [
      'an array of one record without its id',
      `{"data":[{"state":"SUCCESSFUL","amount":1,"custom_data":${big}}]}`,
    ],
  ])('reads a custom_data integer above 2^53 as its exact digits: %s', (_, body) => {
    expect(recordOf(body).custom_data).toBe(big);
  });

  it('reads decoded JSON custom_data holding a big integer as its exact source text', () => {
    const customData = `{"orderId": ${big}}`;
    expect(recordOf(`{"data":${rawRecord(ID, customData)}}`).custom_data).toBe(customData);
  });

  it.each<[string, unknown]>([
    ['one record of another id', statusRecord({ transaction_id: 'EFB.999999' })],
    [
      'several records, none of the id',
      [statusRecord({ transaction_id: 'EFB.000001' }), statusRecord({ transaction_id: 'EFB.000002' })],
    ],
    [
      'several records without an id',
      [
        { state: 'SUCCESSFUL', amount: 1 },
        { state: 'FAILED', amount: 1 },
      ],
    ],
    ['another id beside a record without one', ['EFB.999999', { state: 'SUCCESSFUL', amount: 5000 }]],
    ['a record whose id is null', { ...statusRecord(), transaction_id: null }],
    ['a record whose id differs in case', statusRecord({ transaction_id: ID.toLowerCase() })],
    ['a record whose id has a trailing space', statusRecord({ transaction_id: `${ID} ` })],
  ])('never takes %s as the status of the id asked', (_, data) => {
    const error = queryErrorOf({ data, statut_code: 200, message: '' });
    expect(error.transactionId).toBe(ID);
    expect(error.retryable).toBe(false);
  });

  it('refuses two records of the id that disagree', () => {
    const data = [statusRecord({ state: 'FAILED' }), statusRecord({ state: 'SUCCESSFUL' })];
    expect(queryErrorOf({ data, statut_code: 200 }).message).toContain('disagree');
  });

  it('takes two identical records of the id as one', () => {
    expect(recordOf({ data: [statusRecord(), statusRecord()], statut_code: 200 }).state).toBe('SUCCESSFUL');
  });

  it('refuses a record that gives an identity field twice', () => {
    const body = `{"data":{"transaction_id":"${ID}","state":"FAILED","amount":1,"custom_data":"a","state":"SUCCESSFUL"}}`;
    expect(queryErrorOf(body).message).toContain('ambiguous');
  });

  it.each<[string, Record<string, unknown>, string[]]>([
    ['a complete record', statusRecord(), []],
    ['a record without amount', { transaction_id: ID, state: 'SUCCESSFUL', custom_data: 'o-1' }, ['amount']],
    ['a record with an unreadable amount', statusRecord({ amount: 'n/a' }), ['amount']],
    ['a record without custom_data', { transaction_id: ID, state: 'SUCCESSFUL', amount: 5 }, ['custom_data']],
    ['a record with neither', { transaction_id: ID, state: 'SUCCESSFUL' }, ['amount', 'custom_data']],
    ['a record whose custom_data is null (said empty)', statusRecord({ custom_data: null }), []],
  ])('lackingFields of %s', (_, data, lacking) => {
    expect(lackingFields(recordOf({ data, statut_code: 200 }))).toEqual(lacking);
  });
});
