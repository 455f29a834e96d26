import express from 'express';
import request from 'supertest';
import { ipnRouter, type IpnRouter, type Logger } from '../../lib/index.js';
import docSuccess from '../fixtures/ipn-doc-success.json';
import docSuccessful from '../fixtures/ipn-doc-successful.json';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';

/**
 * The samples of the service's own partner documentation (field notes, "What the provider's own public
 * documentation says"): `SUCCESS` on the IPN configuration page, `reponse`, `commission` with two m, and
 * `custom_data`, `w_amount_after_transaction`, the `p_*` fields and `hash` missing.
 */
describe('the documentation samples through the router', () => {
  let ipn: IpnRouter;
  let recorder: ReturnType<typeof recordEvents>;
  let running: Running;
  let warnings: Array<{ fields: unknown; message: string }>;

  beforeEach(async () => {
    warnings = [];
    const logger: Logger = {
      debug: () => {},
      info: () => {},
      warn: (fields: unknown, message?: string) => void warnings.push({ fields, message: String(message) }),
      error: () => {},
    };
    ipn = ipnRouter({ logger, acknowledgeUnprotected: true });
    recorder = recordEvents(ipn);
    const app = express();
    app.use('/ipn', ipn);
    running = await listen(app);
  });
  afterEach(() => running.close());

  const post = (body: unknown) =>
    request(running.url)
      .post('/ipn')
      .send(body as object);

  test('a SUCCESS notification (IPN configuration page) is credited once, as SUCCESSFUL, rawState kept', async () => {
    const first = await post(docSuccess);
    const resend = await post(docSuccess);
    await settle();

    expect(first.status).toBe(200);
    expect(first.body).toEqual({ ok: true });
    expect(resend.body).toEqual({ ok: true, duplicate: true });
    expect(recorder.names()).toEqual(['notification', 'successful', 'duplicate']);
    expect(recorder.of('successful')[0]).toMatchObject({
      transaction_id: 'EFB.004217',
      state: 'SUCCESSFUL',
      rawState: 'SUCCESS',
      amount: 1000,
      commission: 15,
      response: 'Transaction effectuée avec succès',
      custom_data: 'order-2001',
      w_amount_after_transaction: '',
      p_id: null,
      hash: '',
    });
    expect(recorder.of('successful')[0]).not.toHaveProperty('reponse');
    expect(ipn.metrics().emitted).toEqual({ SUCCESSFUL: 1, FAILED: 0, other: 0 });
  });

  test('a SUCCESS and a SUCCESSFUL copy of one transaction are one notification', async () => {
    await post(docSuccess);
    const other = await post({ ...docSuccess, state: 'SUCCESSFUL' });
    await settle();

    expect(other.body).toEqual({ ok: true, duplicate: true });
    expect(recorder.count('successful')).toBe(1);
    expect(recorder.of('duplicate')[0]).toMatchObject({ state: 'SUCCESSFUL' });
    expect(recorder.of('duplicate')[0]).not.toHaveProperty('rawState');
  });

  test('a SUCCESSFUL sample with reponse, comission and no custom_data is credited once, custom_data empty', async () => {
    const first = await post(docSuccessful);
    await post(docSuccessful);
    await settle();

    expect(first.status).toBe(200);
    expect(recorder.names()).toEqual(['notification', 'successful', 'duplicate']);
    const credited = recorder.of('successful')[0];
    expect(credited).toMatchObject({
      transaction_id: 'PIX_22827810',
      state: 'SUCCESSFUL',
      response: 'operation success',
      commission: 37,
      fee: 0,
      custom_data: '',
    });
    expect(credited).not.toHaveProperty('rawState');
  });

  test('response wins over reponse when both are given; reponse fills an empty response', async () => {
    await post({ ...docSuccessful, transaction_id: 'PIX_1', response: 'ok', reponse: 'autre' });
    await post({ ...docSuccessful, transaction_id: 'PIX_2', response: null, reponse: 'rempli' });
    await settle();

    expect(recorder.of('successful').map((n: { response: string }) => n.response)).toEqual(['ok', 'rempli']);
  });

  test('a payload cannot supply rawState itself', async () => {
    await post({ ...docSuccessful, rawState: 'SUCCESS' });
    await settle();

    expect(recorder.of('successful')[0]).not.toHaveProperty('rawState');
  });

  test('an unknown state reaches notification only, with a warning and a metric', async () => {
    const response = await post({ ...docSuccess, transaction_id: 'EFB.004218', state: 'SUCCES' });
    await settle();

    expect(response.status).toBe(200);
    expect(recorder.names()).toEqual(['notification']);
    expect(ipn.metrics().unknownStates).toBe(1);
    expect(ipn.metrics().emitted.other).toBe(1);
    expect(warnings).toEqual([
      {
        fields: { transaction_id: 'EFB.004218', state: 'SUCCES' },
        message: expect.stringContaining('neither SUCCESSFUL nor FAILED'),
      },
    ]);
  });

  test('a FAILED sample is a failure whatever reponse says', async () => {
    await post({ ...docSuccess, transaction_id: 'EFB.004219', state: 'FAILED', error: 'solde insuffisant' });
    await settle();

    expect(recorder.names()).toEqual(['notification', 'failed']);
    expect(ipn.metrics().unknownStates).toBe(0);
  });
});
