import {
  keepTraceparent,
  startRequestSpan,
  takeTraceparent,
  traceAttempt,
  tracingActive,
  TRACEPARENT_FIELD,
} from '../../../lib/observability/tracing.js';

// With no tracer provider registered (this file registers none): nothing is made, and a record is kept as it
// is. The spans themselves, with the real SDK: test/integration/traces.test.ts.

const n = { transaction_id: 'EFB.1', state: 'SUCCESSFUL' };

test('with no tracer provider registered, no span is started and an attempt runs as it is', async () => {
  expect(tracingActive()).toBe(false);
  expect(startRequestSpan()).toBeUndefined();
  const spans: unknown[] = [];
  const ran = await traceAttempt(n, 'EFB.1:SUCCESSFUL', 1, undefined, (span) => {
    spans.push(span);
    return Promise.resolve('ran');
  });
  expect(ran).toBe('ran');
  expect(spans).toEqual([undefined]);
});

test('a record keeps a traceparent only when there is one, and gives it back without it', () => {
  const record = { transaction_id: 'EFB.1', state: 'SUCCESSFUL' };
  expect(keepTraceparent(record, undefined)).toBe(record);
  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  const kept = keepTraceparent(record, traceparent);
  expect(kept).toEqual({ ...record, [TRACEPARENT_FIELD]: traceparent });
  expect(takeTraceparent(kept)).toEqual({ record, parent: { traceparent } });
  expect(takeTraceparent(record)).toEqual({ record, parent: undefined });
});

test('a stored value that is no traceparent is taken off the record all the same', () => {
  // A hand-edited or foreign row: the listeners never see the field, and the attempt has no link.
  for (const odd of [42, null, 'garbage', '00-zz-zz-01']) {
    const { record } = takeTraceparent({ transaction_id: 'EFB.1', [TRACEPARENT_FIELD]: odd });
    expect(record).toEqual({ transaction_id: 'EFB.1' });
  }
});
