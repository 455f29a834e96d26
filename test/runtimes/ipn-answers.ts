import { gzipSync } from 'node:zlib';
import { uniquePayload } from '../helpers/payloads.js';

/**
 * What every runtime must answer, posted over real HTTP to the server it runs: the first notification 200
 * `{ ok: true }`, the same again a duplicate, a malformed body 400 with its JSON error, a gzip body read.
 */

const JSON_TYPE = { 'content-type': 'application/json' };

async function post(url: string, body: string | Uint8Array, headers: Record<string, string> = {}) {
  const response = await fetch(url, { method: 'POST', headers: { ...JSON_TYPE, ...headers }, body });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** Declares the four answers' tests against the server `url()` names once `beforeAll` has started it. */
export function describeIpnAnswers(url: () => string): void {
  const notification = JSON.stringify(uniquePayload());

  test('the first notification is answered 200 { ok: true }', async () => {
    expect(await post(url(), notification)).toEqual({ status: 200, body: { ok: true } });
  });

  test('the same notification again is answered 200 as a duplicate', async () => {
    expect(await post(url(), notification)).toEqual({ status: 200, body: { ok: true, duplicate: true } });
  });

  test('a malformed body is answered 400 malformed_body', async () => {
    const answer = await post(url(), '{"transaction_id": ');
    expect(answer).toEqual({
      status: 400,
      body: { error: 'malformed_body', message: expect.stringContaining('not valid JSON') },
    });
  });

  test('a gzip-compressed body is read', async () => {
    // A fresh notification: a duplicate would be answered 200 even if the body were not really read.
    const fresh = uniquePayload();
    const answer = await post(url(), gzipSync(JSON.stringify(fresh)), { 'content-encoding': 'gzip' });
    expect(answer).toEqual({ status: 200, body: { ok: true } });
    // Read means parsed: the same notification, uncompressed, is now a duplicate.
    expect(await post(url(), JSON.stringify(fresh))).toEqual({
      status: 200,
      body: { ok: true, duplicate: true },
    });
  });
}

/** One full round of the answers, for a case that is a single test (the Workers module-scope one). */
export async function checkIpnAnswers(url: string): Promise<void> {
  const notification = JSON.stringify(uniquePayload());
  expect(await post(url, notification)).toEqual({ status: 200, body: { ok: true } });
  expect(await post(url, notification)).toEqual({ status: 200, body: { ok: true, duplicate: true } });
  expect((await post(url, '{"transaction_id": ')).status).toBe(400);
  const zipped = gzipSync(JSON.stringify(uniquePayload()));
  expect(await post(url, zipped, { 'content-encoding': 'gzip' })).toEqual({
    status: 200,
    body: { ok: true },
  });
}
