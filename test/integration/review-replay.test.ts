import { ipnRouter, MemoryStore } from '../../lib/index.js';
import { HOLD_MS } from '../../lib/delivery/kept-unexpected.js';
import { holdLeaseId } from '../../lib/delivery/unexpected.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';

/** Findings of the hostile review of review-operate's replay guards (the admin's replay, the paused put-back). */

jest.setTimeout(30_000);
const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;

describe('ipn.inbox.replay(key, from): a kept unexpected notification under its hold lease', () => {
  test('a replay refused by `from` leaves it held: never made due, never credited unconfirmed', async () => {
    const store = new MemoryStore();
    const payload = uniquePayload();
    const key = keyOf(payload);
    // Kept under its hold lease: its status query runs (or the process died before it answered).
    expect(await store.receive(key, payload, { id: holdLeaseId(key), ms: HOLD_MS })).toBe(true);
    const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, backgroundWork: 'drain' });
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.transaction_id));
    try {
      // An app's own "replay it if it is dead" (the status guard the API documents): not dead, so no replay.
      expect(await ipn.inbox.replay(key, ['dead'])).toBe(false);
      const entry = await store.get(key);
      expect(entry?.status).toBe('received');
      expect(entry?.leaseUntil?.getTime()).toBeGreaterThan(Date.now() + HOLD_MS / 2);
      await ipn.drain();
      expect(credited).toEqual([]);
    } finally {
      await ipn.close();
    }
  });
});
