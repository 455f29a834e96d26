import { Readable } from 'node:stream';
import { resolveOptions, type Options } from '../../../lib/config/options.js';
import { createSafeEmitter } from '../../../lib/delivery/safe-emitter.js';
import type { IpnOutcome, IpnRequest } from '../../../lib/pipeline/ipn-outcome.js';
import { createIpnPipeline } from '../../../lib/pipeline/ipn-pipeline.js';
import type { StatusSource } from '../../../lib/index.js';
import type { Store } from '../../../lib/stores/store.js';
import { uniquePayload } from '../../helpers/payloads.js';
import { quiet } from '../../helpers/quiet-logger.js';
import { until } from '../../helpers/until.js';

/** A pipeline over plain values, and every event it emits, in order. */
function pipelineOf(options: Partial<Options<undefined>> = {}) {
  const events: Array<{ name: string; payload: unknown }> = [];
  const { methods, emit, emitAndWait, track } = createSafeEmitter<undefined>(quiet, () => undefined);
  for (const name of ['notification', 'successful', 'duplicate', 'invalid', 'error'] as const) {
    methods.on(name, (payload: unknown) => void events.push({ name, payload }));
  }
  const pipeline = createIpnPipeline<undefined>(resolveOptions({ logger: quiet, ...options }), {
    emit,
    emitAndWait,
    track,
  });
  /** Handles the request, then runs the outcome's work after the answer, as `serve` does. */
  const answer = async (request: IpnRequest): Promise<IpnOutcome> => {
    const outcome = await pipeline.handle(request);
    await outcome.after?.();
    return outcome;
  };
  return { pipeline, answer, events, names: () => events.map((event) => event.name) };
}

const post = (body: unknown): IpnRequest => ({
  method: 'POST',
  contentType: 'application/json',
  body: { stream: Readable.from([Buffer.from(JSON.stringify(body))]) },
});

/** A store whose claims wait until the test lets them through; it records what it released. */
function gatedStore() {
  const released: string[] = [];
  let open = (): void => {};
  const gate = new Promise<void>((resolve) => (open = resolve));
  const claimed = new Set<string>();
  let pending = 0;
  const store: Store = {
    async claim(key) {
      pending += 1;
      await gate;
      if (claimed.has(key)) return false;
      claimed.add(key);
      return true;
    },
    release(key) {
      released.push(key);
      claimed.delete(key);
    },
  };
  return { store, released, open, pending: () => pending };
}

describe('createIpnPipeline: an IpnRequest in, an IpnOutcome out', () => {
  test('GET and HEAD are liveness pings: 200 {"ok":true}, no work after', async () => {
    const { pipeline } = pipelineOf();
    for (const method of ['GET', 'HEAD']) {
      const outcome = await pipeline.handle({ method, body: { consumed: true } });
      expect(outcome).toEqual({ status: 200, body: { ok: true } });
    }
  });

  test('another method is 405 with Allow, and nothing emitted', async () => {
    const { answer, names } = pipelineOf();
    const outcome = await answer({ method: 'DELETE', body: { consumed: true } });
    expect(outcome).toMatchObject({
      status: 405,
      headers: { Allow: 'GET, HEAD, POST' },
      body: { error: 'method_not_allowed' },
    });
    expect(names()).toEqual([]);
  });

  test('a first notification is 200, and its work after the answer delivers it', async () => {
    const { pipeline, names, events } = pipelineOf();
    const payload = uniquePayload();
    const outcome = await pipeline.handle(post(payload));
    expect(outcome).toMatchObject({ status: 200, body: { ok: true } });
    expect(names()).toEqual([]); // nothing before the answer: listeners never delay the 200

    await outcome.after?.();

    expect(names()).toEqual(['notification', 'successful']);
    expect(events[1]?.payload).toMatchObject({ transaction_id: payload.transaction_id });
  });

  test('a resend is 200 duplicate and emits duplicate', async () => {
    const { answer, names } = pipelineOf();
    const payload = uniquePayload();
    await answer(post(payload));

    const outcome = await answer(post(payload));

    expect(outcome).toMatchObject({ status: 200, body: { ok: true, duplicate: true } });
    expect(names()).toEqual(['notification', 'successful', 'duplicate']);
  });

  test('a body a host parser already parsed is read as it is', async () => {
    const { answer, names } = pipelineOf();
    const outcome = await answer({ method: 'POST', body: { parsed: uniquePayload() } });
    expect(outcome.status).toBe(200);
    expect(names()).toEqual(['notification', 'successful']);
  });

  test('invalid fields are 400 with the issues, and emit invalid', async () => {
    const { answer, names } = pipelineOf();
    const outcome = await answer(post({ transaction_id: 'T1' }));
    expect(outcome).toMatchObject({ status: 400, body: { error: 'invalid_fields' } });
    expect(outcome.body?.issues).toEqual(
      expect.arrayContaining([expect.objectContaining({ path: 'state' })]),
    );
    expect(names()).toEqual(['invalid']);
  });

  test('a body something else consumed is 500 body_unavailable, and emits error', async () => {
    const { answer, names } = pipelineOf();
    const outcome = await answer({ method: 'POST', body: { consumed: true } });
    expect(outcome).toMatchObject({ status: 500, body: { error: 'body_unavailable' } });
    expect(names()).toEqual(['error']);
  });

  test('after close(), a notification is 503 closed with Retry-After, and never claimed', async () => {
    const { store, pending } = gatedStore();
    const { pipeline, answer, names } = pipelineOf({ store });
    await pipeline.close();

    const outcome = await answer(post(uniquePayload()));

    expect(outcome).toMatchObject({
      status: 503,
      headers: { 'Retry-After': '30' },
      body: { error: 'closed' },
    });
    expect(pending()).toBe(0);
    expect(names()).toEqual([]);
  });

  test('a claim in flight when close() is called is undone and answers 503 closed', async () => {
    const { store, released, open, pending } = gatedStore();
    const { pipeline, answer, names } = pipelineOf({ store });
    const payload = uniquePayload();
    const answered = answer(post(payload));
    await until(() => pending() === 1, 'the claim to start');

    const closed = pipeline.close(); // waits for the claim in flight
    open();
    const outcome = await answered;
    await closed;

    expect(outcome).toMatchObject({
      status: 503,
      headers: { 'Retry-After': '30' },
      body: { error: 'closed' },
    });
    expect(released).toEqual([`${String(payload.transaction_id)}:SUCCESSFUL`]);
    expect(names()).toEqual([]);
  });

  test('a store that fails the claim is 503 store_unavailable with Retry-After, and emits error', async () => {
    const failing: Store = {
      claim: () => Promise.reject(new Error('connection refused')),
      release: () => {},
    };
    const { answer, events } = pipelineOf({ store: failing });

    const outcome = await answer(post(uniquePayload()));

    expect(outcome).toMatchObject({
      status: 503,
      headers: { 'Retry-After': '30' },
      body: { error: 'store_unavailable' },
    });
    expect(events.map((event) => event.name)).toEqual(['error']);
    expect(events[0]?.payload).toMatchObject({ error: { name: 'StoreError' } });
  });

  test('past maxPendingVerifications, a notification is 503 verification_busy, and emits error', async () => {
    let release = (): void => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const verify: StatusSource = {
      async getStatus() {
        await held;
        throw new Error('not reached in this test');
      },
    };
    const { pipeline, answer, events } = pipelineOf({ verify, maxPendingVerifications: 1 });
    const first = await pipeline.handle(post(uniquePayload()));
    expect(first.status).toBe(200);
    const verifying = first.after?.(); // verification starts and holds the one place

    const outcome = await answer(post(uniquePayload()));

    expect(outcome).toMatchObject({
      status: 503,
      headers: { 'Retry-After': '30' },
      body: { error: 'verification_busy' },
    });
    expect(events.map((event) => event.name)).toEqual(['error']);
    expect(events[0]?.payload).toMatchObject({ error: { name: 'VerificationBusyError' } });
    release();
    await verifying;
    await pipeline.close();
  });
});
