import { randomUUID } from 'node:crypto';
import {
  ipnNotificationSchema,
  ipnRouter,
  MemoryStore,
  TransactionNotFoundError,
  type IpnNotification,
  type Logger,
  type StatusSource,
} from 'ipn-kit';
import { expectAnother, keptServer } from '../helpers/kept-unexpected.js';
import { until } from '../helpers/until.js';
import { NO_SWEEP } from '../helpers/verified-payments.js';

jest.setTimeout(30_000);

/** A logger that keeps what it was told (level and message). */
function recordingLogger(): Logger & { lines: Array<{ level: string; message: string }> } {
  const lines: Array<{ level: string; message: string }> = [];
  const at =
    (level: string) =>
    (...args: unknown[]): void =>
      void lines.push({ level, message: args.map((arg) => (typeof arg === 'string' ? arg : '')).join(' ') });
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/**
 * A forgery kept under the hold lease while its own status query is still running (the service slow), when
 * the payment it guessed the id of is expected and `ipn.reconcile()` puts the service's record in its place.
 */
describe('a forgery replaced while its own status query runs (MemoryStore)', () => {
  const serve = keptServer();

  test('the genuine payment is credited once, never the forgery; the forgery is still reported', async () => {
    const id = `EFQ.${randomUUID().slice(0, 8)}`;
    const record = (amount: number): IpnNotification =>
      ipnNotificationSchema.parse({
        transaction_id: id,
        state: 'SUCCESSFUL',
        amount,
        custom_data: 'order-7',
      });
    let release: (answer: IpnNotification) => void = () => {};
    const forgeryQuery = new Promise<IpnNotification>((resolve) => (release = resolve));
    let queries = 0;
    const service: { known?: IpnNotification } = {};
    const source: StatusSource = {
      async getStatus(transactionId) {
        if (transactionId !== id) throw new TransactionNotFoundError(transactionId);
        queries += 1;
        if (queries === 1) return forgeryQuery; // the forgery's one query: the service is slow
        if (service.known === undefined) throw new TransactionNotFoundError(transactionId);
        return service.known;
      },
    };
    const logger = recordingLogger();
    const { ipn, events, post } = await serve(
      ipnRouter({
        store: new MemoryStore(),
        delivery: 'at-least-once',
        logger,
        statusClient: source,
        reconcileAfterMs: 10,
        sweepIntervalMs: NO_SWEEP,
        recoveryIntervalMs: 50,
      }),
    );
    await expectAnother(ipn);
    const forged = { transaction_id: id, state: 'SUCCESSFUL', amount: 1, custom_data: 'order-7' };
    expect((await post(forged)).status).toBe(200);
    await until(() => queries === 1, "the forgery's status query");
    // The payment happens, the app expects it; the service's notification of it, matching its expectation,
    // takes the forgery's place on arrival (the forgery still under its hold lease): then reconcile() finds
    // nothing kept, and emits nothing more.
    service.known = record(5000);
    await ipn.expect(id, { amount: 5000, customData: 'order-7' });
    expect(await (await post({ ...forged, amount: 5000 })).json()).toEqual({ ok: true });
    expect(await ipn.reconcile(id)).toMatchObject({ emitted: false });
    await until(() => events.count('successful') > 0, 'the credit');
    // The forgery's query answers at last (the service's record: another amount).
    release(record(5000));
    await until(
      () => logger.lines.some((line) => /while its status query ran/.test(line.message)),
      "the forgery's query settled",
    );
    await ipn.drain({ budgetMs: 300 });
    expect(events.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
    expect(await ipn.inbox.get(`${id}:SUCCESSFUL`)).toMatchObject({
      status: 'delivered',
      record: expect.objectContaining({ amount: 5000 }),
    });
    // No operator replayed anything: the log must not say one did.
    expect(logger.lines.filter((line) => /replayed by an operator/.test(line.message))).toEqual([]);
    // docs/service-rules.md: "the forgery's own `rejected` event came when it arrived".
    expect(events.of('rejected')).toEqual([
      expect.objectContaining({ reason: 'unexpected', notification: expect.objectContaining({ amount: 1 }) }),
    ]);
  });
});

/**
 * `close()` while the service's record is being written in a kept forgery's place (`replayWith` still
 * running): the store is closed only once that write has settled (by `ipn.reconcile()` and by the sweep).
 */
describe("close() while the record's write in a kept forgery's place runs (MemoryStore)", () => {
  const serve = keptServer();

  class GatedStore extends MemoryStore {
    pending = 0;
    calls = 0;
    closedUnderWrite = false;
    closed = false;
    gate: Promise<void> = Promise.resolve();
    open: () => void = () => {};
    hold(): void {
      this.gate = new Promise<void>((resolve) => (this.open = resolve));
    }
    override async replayWith(...args: Parameters<MemoryStore['replayWith']>): Promise<boolean> {
      this.pending += 1;
      this.calls += 1;
      try {
        await this.gate;
        return await super.replayWith(...args);
      } finally {
        this.pending -= 1;
      }
    }
    close(): void {
      this.closedUnderWrite ||= this.pending > 0;
      this.closed = true;
    }
  }

  for (const by of ['reconcile', 'sweep'] as const) {
    test(`by ${by}: the store is closed after the write, which lands`, async () => {
      const id = `EFC.${randomUUID().slice(0, 8)}`;
      const service: { known?: IpnNotification } = {};
      const source: StatusSource = {
        getStatus(transactionId) {
          if (transactionId !== id || service.known === undefined)
            return Promise.reject(new TransactionNotFoundError(transactionId));
          return Promise.resolve(service.known);
        },
      };
      const store = new GatedStore();
      const { ipn, events, post } = await serve(
        ipnRouter({
          store,
          delivery: 'at-least-once',
          logger: recordingLogger(),
          statusClient: source,
          reconcileAfterMs: 10,
          sweepIntervalMs: NO_SWEEP,
        }),
      );
      await expectAnother(ipn);
      const forged = { transaction_id: id, state: 'SUCCESSFUL', amount: 1, custom_data: 'order-8' };
      expect((await post(forged)).status).toBe(200);
      await until(() => events.count('rejected') > 0, 'the kept forgery'); // the service: not found
      service.known = ipnNotificationSchema.parse({ ...forged, amount: 5000 });
      await ipn.expect(id, { amount: 5000, customData: 'order-8' });
      const dueAt = Date.now() + 20;
      store.hold();
      await until(() => Date.now() >= dueAt, 'the expectation due (reconcileAfterMs: 10)');
      const asking = by === 'reconcile' ? ipn.reconcile(id) : ipn.sweep();
      asking.catch(() => undefined);
      await until(() => store.calls > 0, 'the replayWith call', 4_000);
      const closing = ipn.close({ timeoutMs: 5_000 });
      setImmediate(() => store.open());
      await closing;
      await asking;
      expect(store.closedUnderWrite).toBe(false);
      expect(store.closed).toBe(true);
      expect(await store.get(`${id}:SUCCESSFUL`)).toMatchObject({
        status: 'received',
        record: expect.objectContaining({ amount: 5000 }),
      });
    });
  }
});
