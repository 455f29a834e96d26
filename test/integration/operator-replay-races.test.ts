import { adminFetchHandler } from '../../lib/admin.js';
import { ipnRouter, MemoryStore } from '../../lib/index.js';
import { HOLD_MS } from '../../lib/delivery/kept-unexpected.js';
import { holdLeaseId } from '../../lib/delivery/unexpected.js';
import type { DeliveryStatus, ListOptions, InboxEntry } from '../../lib/stores/store.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { eventually } from '../helpers/services.js';
import { confirmed, keyOf, notification, pageWithEntry } from '../helpers/admin-forms.js';

/** The operator's replays done once: forms sent twice at once, or again much later; a held notification's replay. */

jest.setTimeout(30_000);

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

/** A MemoryStore whose audit trail keeps its first action only once `letGo()` is called. */
class SlowAuditStore extends MemoryStore {
  recording = 0;
  lists = 0;
  letGo: () => void = () => {};
  onList: (count: number) => void = () => {};
  constructor() {
    super();
    const record = this.audit.record.bind(this.audit);
    const gate = new Promise<void>((resolve) => (this.letGo = resolve));
    let first = true;
    this.audit.record = async (entry) => {
      this.recording += 1;
      if (first) {
        first = false;
        await gate;
      }
      return record(entry);
    };
  }
  override list(options?: ListOptions): Promise<InboxEntry[]> {
    this.lists += 1;
    this.onList(this.lists);
    return super.list(options);
  }
}

describe("the operator's page: one bulk replay's form sent twice", () => {
  test('sent again while the first is still being done (a second click, a resend after a timeout): replayed once', async () => {
    const store = new SlowAuditStore();
    const { ipn, admin, payload, key, credited } = await pageWithEntry(store, 'delivered');
    try {
      const id = String(payload.transaction_id);
      // The operator replays what the filter "delivered" shows, on purpose: credited a second time.
      const send = await confirmed(admin, `action=replay-filter&status=delivered&transaction=${id}`);
      const listed = store.lists;
      const first = send();
      // The first is done (replayed, delivered again) and is being kept in the audit trail (a slow store)...
      await eventually('the first is being recorded', () => store.recording === 1);
      await eventually(
        'delivered again',
        async () => credited.length === 2 && (await store.get(key))?.status === 'delivered',
      );
      // ... when the same form is sent again. The first's record lands as soon as the second lists the inbox.
      store.onList = (count) => count > listed + 1 && store.letGo();
      const second = await send();
      store.letGo();
      expect((await first).status).toBe(200);
      expect(second.status).toBe(409);
      await ipn.drain();
      expect((await store.get(key))?.status).toBe('delivered');
      expect(credited).toEqual([id, id]);
    } finally {
      store.letGo();
      await ipn.close();
    }
  });
});

/**
 * A MemoryStore that, armed, holds the first `get` until a second one comes (two requests read the entry
 * at once), and holds the second `replay` until `redelivered()` (a slow write).
 */
class RacingStore extends MemoryStore {
  armed = false;
  #gets: (() => void)[] = [];
  #replays = 0;
  #replayGate: Promise<void> = new Promise((resolve) => (this.redelivered = resolve));
  redelivered: () => void = () => {};
  releaseGets(): void {
    for (const go of this.#gets.splice(0)) go();
  }
  override async get(key: string): Promise<InboxEntry | undefined> {
    if (this.armed && this.#gets.length < 1) {
      await new Promise<void>((resolve) => this.#gets.push(resolve));
    } else if (this.armed) this.releaseGets();
    return super.get(key);
  }
  override async replay(key: string, delayMs?: number, from?: readonly DeliveryStatus[]): Promise<boolean> {
    if (this.armed && ++this.#replays === 2) await this.#replayGate;
    return super.replay(key, delayMs, from);
  }
}

describe("the operator's page: one entry's replay confirmed in two tabs at once", () => {
  test('of a delivered entry, both sent at once: replayed once (the second answers 409)', async () => {
    const store = new RacingStore();
    const { ipn, admin, payload, key, credited } = await pageWithEntry(store, 'delivered');
    try {
      const id = String(payload.transaction_id);
      // The operator replays it on purpose (a listener's bug lost its effect), from two tabs (or a double click).
      const send = await confirmed(admin, `action=replay&key=${encodeURIComponent(key)}`);
      store.armed = true;
      const sent = [send(), send()];
      for (const one of sent) void one.finally(() => store.releaseGets());
      await eventually(
        'delivered again',
        async () => credited.length === 2 && (await super_get(store, key))?.status === 'delivered',
      );
      store.redelivered();
      const statuses = (await Promise.all(sent)).map((answer) => answer.status);
      expect(statuses.sort()).toEqual([200, 409]);
      store.armed = false;
      await ipn.drain();
      expect((await store.get(key))?.status).toBe('delivered');
      expect(credited).toEqual([id, id]);
    } finally {
      store.armed = false;
      store.redelivered();
      store.releaseGets();
      await ipn.close();
    }
  });
});

/** The entry as the store keeps it, past `RacingStore`'s gate. */
const super_get = (store: RacingStore, key: string) => MemoryStore.prototype.get.call(store, key);

describe("the operator's page: one bulk replay's form sent again after many other actions", () => {
  test('to another instance, after 250 other operator actions: replayed once (409)', async () => {
    const store = new MemoryStore();
    const common = { store, delivery: 'at-least-once' as const, logger: quiet, recoveryIntervalMs: 20 };
    const a = ipnRouter(common);
    const b = ipnRouter(common);
    const credited: string[] = [];
    for (const ipn of [a, b]) ipn.on('successful', (n) => void credited.push(n.transaction_id));
    const adminA = adminFetchHandler({ ipn: a, authorize: () => ({ actor: 'ada' }) });
    const adminB = adminFetchHandler({ ipn: b, authorize: () => ({ actor: 'ada' }) });
    try {
      const payload = uniquePayload();
      const id = String(payload.transaction_id);
      const key = keyOf(payload);
      expect((await a.fetch(notification(payload))).status).toBe(200);
      await eventually('delivered', async () => (await store.get(key))?.status === 'delivered');
      const send = await confirmed(adminA, `action=replay-filter&status=delivered&transaction=${id}`);
      expect((await send()).status).toBe(200);
      await eventually(
        'delivered again',
        async () => credited.length === 2 && (await store.get(key))?.status === 'delivered',
      );
      // A busy day: other operators (or the CLI, or a script) replay entries one by one.
      for (let i = 0; i < 250; i += 1) {
        await a.inbox.recordAction({
          action: 'replay',
          actor: 'bob',
          detail: { key: `other-${i}:SUCCESSFUL` },
        });
      }
      // The same form sent again (the browser's history, "resend"), answered by the other instance.
      const again = await send(adminB);
      expect(again.status).toBe(409);
      await b.drain();
      await a.drain();
      expect((await store.get(key))?.status).toBe('delivered');
      expect(credited).toEqual([id, id]);
    } finally {
      await a.close();
      await b.close();
    }
  });
});

describe("the operator's page: a bulk replay's confirmation a day old", () => {
  test('is refused 409 (confirm again): nothing replayed', async () => {
    const store = new MemoryStore();
    const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, backgroundWork: 'drain' });
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.transaction_id));
    const admin = adminFetchHandler({ ipn, authorize: () => ({ actor: 'ada' }) });
    try {
      const payload = uniquePayload();
      const id = String(payload.transaction_id);
      expect((await ipn.fetch(notification(payload))).status).toBe(200);
      await ipn.drain();
      expect(credited).toEqual([id]);
      const dayAgo = Date.now() - 25 * 60 * 60 * 1000;
      const send = await confirmed(admin, `action=replay-filter&status=delivered&transaction=${id}`, (form) =>
        form.set('once', form.get('once')!.replace(/^\d+/, String(dayAgo))),
      );
      const answer = await send();
      expect(answer.status).toBe(409);
      expect(await answer.text()).toContain('more than a day old');
      await ipn.drain();
      expect(credited).toEqual([id]);
    } finally {
      await ipn.close();
    }
  });
});

describe("the operator's page: one entry's replay of an entry changed in the same status", () => {
  test('dead, replayed elsewhere and dead again: the 409 says it was attempted again, not "it was dead, it is dead now"', async () => {
    const store = new MemoryStore();
    const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, backgroundWork: 'drain' });
    const admin = adminFetchHandler({ ipn, authorize: () => ({ actor: 'ada' }) });
    try {
      const payload = uniquePayload();
      const key = keyOf(payload);
      const lease = { id: 'attempt-1', ms: 60_000 };
      expect(await store.receive(key, payload, lease)).toBe(true);
      expect(await store.settle(key, lease.id, { status: 'dead', error: 'ledger down' })).toBe(true);
      const send = await confirmed(admin, `action=replay&key=${encodeURIComponent(key)}`);
      // Meanwhile (a millisecond later at least: the page compares last changes to the millisecond) another
      // operator replays it, and it goes dead again.
      const confirmedAt = Date.now();
      await eventually('a millisecond later', () => Date.now() > confirmedAt);
      expect(await store.replay(key)).toBe(true);
      const [taken] = await store.lease({ id: 'attempt-2', ms: 60_000 }, 10);
      expect(taken?.key).toBe(key);
      expect(await store.settle(key, 'attempt-2', { status: 'dead', error: 'ledger down' })).toBe(true);
      const answer = await send();
      expect(answer.status).toBe(409);
      const text = await answer.text();
      expect(text).toContain('is dead still, but was attempted again or replayed meanwhile');
      expect(text).not.toContain('it was dead, it is dead now');
    } finally {
      await ipn.close();
    }
  });
});
