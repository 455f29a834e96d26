import { EventEmitter } from 'node:events';
import { createEventRing } from '../../../lib/admin/event-ring.js';
import { IpnKitError } from '../../../lib/index.js';
import type { AdminSource } from '../../../lib/admin/admin-options.js';

// At-most-once mode has no inbox: the page shows the recent `rejected` and `error` events, kept in a ring
// that never grows past `recentEvents`, newest first.

function source() {
  const emitter = new EventEmitter();
  const ipn = { on: (name: string, listener: never) => emitter.on(name, listener) } as unknown as AdminSource;
  return { ipn, emitter };
}

test('keeps only the last `size` rejected and error events, newest first', () => {
  const { ipn, emitter } = source();
  const ring = createEventRing(ipn, 3);
  for (let n = 1; n <= 5; n += 1) {
    emitter.emit('rejected', {
      reason: 'not_found',
      message: `forged ${n}`,
      notification: { transaction_id: `EFB.00000${n}`, state: 'SUCCESSFUL' },
    });
  }
  emitter.emit('error', { error: new IpnKitError('IPN_STORE_FAILED', 'the store failed') });
  const recent = ring.recent();
  expect(recent).toHaveLength(3);
  expect(recent.map((event) => event.kind)).toEqual(['error', 'rejected', 'rejected']);
  expect(recent[0]).toMatchObject({ reason: 'IPN_STORE_FAILED', transactionId: undefined });
  expect(recent.slice(1).map((event) => event.transactionId)).toEqual(['EFB.000005', 'EFB.000004']);
});

test('an event with an odd payload is kept without throwing', () => {
  const { ipn, emitter } = source();
  const ring = createEventRing(ipn, 2);
  emitter.emit('rejected', { reason: 'mismatch', message: 'x', notification: null });
  emitter.emit('error', { error: new Error('plain'), notification: 'not an object' });
  expect(ring.recent().map((event) => [event.kind, event.reason, event.transactionId])).toEqual([
    ['error', 'error', undefined],
    ['rejected', 'mismatch', undefined],
  ]);
});
