import { createAlertMonitor, type InboxReader } from '../../../lib/observability/alerts.js';
import type { AlertEvent, AlertOptions } from '../../../lib/observability/alert-event.js';
import {
  StatusQueryError,
  StatusRateLimitError,
  TransactionNotFoundError,
} from '../../../lib/shared/errors.js';
import { quiet } from '../../helpers/quiet-logger.js';

const DEFAULTS: AlertOptions = {
  failuresInARow: 10,
  failureRatio: 0.5,
  failureRatioMinAttempts: 20,
  failureWindowMs: 300_000,
  backlogAgeMs: 300_000,
  forgedBurst: 5,
  forgedWindowMs: 60_000,
  quietMs: 300_000,
};

/** A monitor on a clock the test moves, with what it told. */
function setup(thresholds: Partial<AlertOptions> = {}, listening = true) {
  let clock = Date.UTC(2026, 10, 28, 3, 0, 0);
  const told: AlertEvent[] = [];
  const state = { listening, reads: 0 };
  const monitor = createAlertMonitor({
    thresholds: { ...DEFAULTS, ...thresholds },
    emit: (event) => void told.push(event),
    listening: () => state.listening,
    logger: quiet,
    storeTimeoutMs: 1_000,
    now: () => clock,
  });
  const advance = (ms: number) => {
    clock += ms;
    jest.advanceTimersByTime(ms);
  };
  return { monitor, told, state, advance, now: () => clock };
}

/** An inbox whose oldest entries of each status the test sets. */
function inbox(oldest: Partial<Record<'received' | 'failed' | 'dead', Date>>) {
  const reader: InboxReader & { reads: number } = {
    reads: 0,
    list: ({ status }) => {
      reader.reads += 1;
      const at = oldest[status];
      return Promise.resolve(at ? [{ receivedAt: at, key: `EFB.1:${status}` }] : []);
    },
  };
  return reader;
}

const brief = (events: AlertEvent[]) => events.map((e) => `${e.kind} ${e.state} ${e.count}`);

beforeEach(() => jest.useFakeTimers({ doNotFake: ['performance'] }));
afterEach(() => jest.useRealTimers());

describe('deliveries_failing', () => {
  test('ten failed attempts in a row fire once; the next delivered attempt resolves it', () => {
    const { monitor, told, advance } = setup();
    for (let i = 0; i < 9; i += 1) monitor.attempt(false, 'EFB.1:SUCCESSFUL', 'ledger down');
    expect(told).toEqual([]);
    monitor.attempt(false, 'EFB.1:SUCCESSFUL', 'ledger down');
    expect(told).toHaveLength(1);
    expect(told[0]).toMatchObject({
      kind: 'deliveries_failing',
      state: 'firing',
      count: 10,
      value: 10,
      threshold: 10,
      lastError: 'ledger down',
      key: 'EFB.1:SUCCESSFUL',
      message: '10 delivery attempts failed in a row',
    });
    const since = told[0]?.since;
    for (let i = 0; i < 50; i += 1) monitor.attempt(false, 'EFB.1:SUCCESSFUL', 'ledger down');
    expect(told).toHaveLength(1); // never once per attempt
    advance(5_000);
    monitor.attempt(true, 'EFB.1:SUCCESSFUL');
    expect(brief(told)).toEqual(['deliveries_failing firing 10', 'deliveries_failing resolved 60']);
    expect(told[1]?.since).toEqual(since);
    expect(told[1]?.at.getTime()).toBe(since!.getTime() + 5_000);
    // The ratio of the failures before the recovery is not held against the next failure.
    monitor.attempt(false, 'EFB.1:SUCCESSFUL', 'ledger down');
    expect(told).toHaveLength(2);
  });

  test('a success between failures starts the count over', () => {
    const { monitor, told } = setup();
    for (let i = 0; i < 9; i += 1) monitor.attempt(false, 'k', 'e');
    monitor.attempt(true, 'k');
    for (let i = 0; i < 9; i += 1) monitor.attempt(false, 'k', 'e');
    expect(told).toEqual([]);
  });

  test('a failure ratio over the window fires, once there were enough attempts, and holds through a success', () => {
    const { monitor, told, advance } = setup({ failuresInARow: 1000 });
    for (let i = 0; i < 10; i += 1) {
      monitor.attempt(true, 'k');
      monitor.attempt(false, 'k', 'e');
      advance(1_000);
    }
    expect(brief(told)).toEqual(['deliveries_failing firing 1']);
    expect(told[0]?.value).toBe(0.5);
    // A success that leaves the share over half the threshold does not resolve it (no flapping).
    for (let i = 0; i < 20; i += 1) monitor.attempt(true, 'k'); // 10 of 40
    expect(told).toHaveLength(1);
    // Past the window, the old failures are gone: the next success resolves it.
    advance(300_000);
    monitor.attempt(true, 'k');
    expect(brief(told)).toEqual(['deliveries_failing firing 1', 'deliveries_failing resolved 1']);
  });
});

describe('dead', () => {
  test('the first dead event fires at once; an inbox read with no dead entry resolves it', async () => {
    const { monitor, told, advance } = setup();
    monitor.observe('dead', { key: 'EFB.1:SUCCESSFUL', attempts: 8, lastError: 'boom' });
    expect(told).toHaveLength(1);
    expect(told[0]).toMatchObject({
      kind: 'dead',
      state: 'firing',
      key: 'EFB.1:SUCCESSFUL',
      lastError: 'boom',
    });
    monitor.observe('dead', { key: 'EFB.2:SUCCESSFUL', attempts: 8, lastError: 'boom' });
    await monitor.checkInbox(inbox({ dead: new Date() }));
    expect(told).toHaveLength(1);
    advance(1_000);
    await monitor.checkInbox(inbox({}));
    expect(brief(told)).toEqual(['dead firing 1', 'dead resolved 2']);
  });

  test('an inbox read that finds a dead entry fires (after a restart)', async () => {
    const { monitor, told } = setup();
    await monitor.checkInbox(inbox({ dead: new Date() }));
    expect(told[0]).toMatchObject({ kind: 'dead', state: 'firing', key: 'EFB.1:dead' });
  });

  test('an inbox read begun before a dead event does not resolve it', async () => {
    const { monitor, told } = setup();
    let answer: (entries: []) => void = () => {};
    const slow: InboxReader = {
      list: ({ status }) =>
        status === 'dead' ? new Promise<[]>((resolve) => (answer = resolve)) : Promise.resolve([]),
    };
    const reading = monitor.checkInbox(slow);
    monitor.observe('dead', { key: 'k', attempts: 8, lastError: 'e' });
    answer([]);
    await reading;
    expect(brief(told)).toEqual(['dead firing 1']);
  });
});

describe('backlog', () => {
  test('fires when the oldest entry not delivered is older than backlogAgeMs, resolves when two reads in a row find it younger', async () => {
    const { monitor, told, now } = setup();
    await monitor.checkInbox(inbox({ received: new Date(now() - 60_000) }));
    expect(told).toEqual([]);
    expect(monitor.backlogAgeMs()).toBe(60_000);
    await monitor.checkInbox(
      inbox({ received: new Date(now() - 60_000), failed: new Date(now() - 301_000) }),
    );
    expect(told).toHaveLength(1);
    expect(told[0]).toMatchObject({ kind: 'backlog', state: 'firing', value: 301_000, threshold: 300_000 });
    expect(told[0]?.key).toBe('EFB.1:failed');
    await monitor.checkInbox(inbox({ failed: new Date(now() - 400_000) }));
    expect(told).toHaveLength(1);
    await monitor.checkInbox(inbox({}));
    expect(told).toHaveLength(1); // one read alone may have missed an entry changing status
    await monitor.checkInbox(inbox({ received: new Date(now() - 400_000) }));
    await monitor.checkInbox(inbox({}));
    expect(told).toHaveLength(1);
    await monitor.checkInbox(inbox({}));
    expect(brief(told)).toEqual(['backlog firing 1', 'backlog resolved 1']);
    expect(monitor.backlogAgeMs()).toBe(0);
  });

  test('a failed read changes nothing and never rejects', async () => {
    const { monitor, told } = setup();
    await expect(
      monitor.checkInbox({ list: () => Promise.reject(new Error('down')) }),
    ).resolves.toBeUndefined();
    expect(told).toEqual([]);
  });
});

describe('the kinds that resolve after quietMs without another', () => {
  test('stale fires at the first and resolves quietMs after the last', () => {
    const { monitor, told, advance } = setup();
    monitor.observe('stale', { transactionId: 'EFB.1', reason: 'not_found' });
    advance(200_000);
    monitor.observe('stale', { transactionId: 'EFB.2', reason: 'not_found' });
    advance(200_000); // 300 s after the first, 200 s after the last
    expect(brief(told)).toEqual(['stale firing 1']);
    advance(100_000);
    expect(brief(told)).toEqual(['stale firing 1', 'stale resolved 2']);
    expect(told[0]?.key).toBe('EFB.1');
  });

  test('conflict fires at the first and resolves after quietMs', () => {
    const { monitor, told, advance } = setup();
    const notification = { transaction_id: 'EFB.1', state: 'FAILED' };
    monitor.observe('conflict', { notification, accepted: 'SUCCESSFUL', message: 'x' });
    expect(told[0]).toMatchObject({ kind: 'conflict', state: 'firing', key: 'EFB.1:FAILED' });
    advance(300_000);
    expect(brief(told)).toEqual(['conflict firing 1', 'conflict resolved 1']);
  });

  test('forged: a burst of 401s and rejected within the window fires, fewer do not', () => {
    const { monitor, told, advance } = setup();
    const unauthorized = { reason: 'unauthorized', status: 401 };
    for (let i = 0; i < 4; i += 1) monitor.observe('invalid', unauthorized);
    monitor.observe('invalid', { reason: 'malformed_body', status: 400 }); // not a forgery
    advance(60_000);
    monitor.observe('invalid', unauthorized); // the first four left the window
    expect(told).toEqual([]);
    for (let i = 0; i < 3; i += 1) monitor.observe('invalid', unauthorized);
    monitor.observe('rejected', { reason: 'mismatch' });
    expect(brief(told)).toEqual(['forged firing 5']);
    for (let i = 0; i < 100; i += 1) monitor.observe('invalid', unauthorized);
    advance(300_000);
    expect(brief(told)).toEqual(['forged firing 5', 'forged resolved 105']);
  });
});

describe('status_refused', () => {
  test('a 429 or a running cool-down fires; a budget refusal does not; an answer resolves', () => {
    const { monitor, told } = setup();
    monitor.status(new StatusRateLimitError('EFB.1', 'budget', 1_000));
    expect(told).toEqual([]);
    const blocked = new StatusQueryError('EFB.1', 'answered 429', {
      retryable: false,
      blocked: true,
      httpStatus: 429,
    });
    monitor.status(blocked);
    monitor.status(new StatusRateLimitError('EFB.1', 'blocked', 60_000));
    expect(brief(told)).toEqual(['status_refused firing 1']);
    monitor.status(new TransactionNotFoundError('EFB.2'));
    expect(brief(told)).toEqual(['status_refused firing 1', 'status_refused resolved 2']);
  });
});

describe('with no alert listener', () => {
  test('no hook reads the clock, counts, tells or reads the inbox', async () => {
    let clockReads = 0;
    const told: AlertEvent[] = [];
    const monitor = createAlertMonitor({
      thresholds: DEFAULTS,
      emit: (event) => void told.push(event),
      listening: () => false,
      logger: quiet,
      storeTimeoutMs: 1_000,
      now: () => {
        clockReads += 1;
        return Date.now();
      },
    });
    const reader = inbox({ dead: new Date(0), failed: new Date(0) });
    for (let i = 0; i < 1_000; i += 1) {
      monitor.attempt(false, 'k', 'e');
      monitor.attempt(true, 'k');
      monitor.observe('notification', { state: 'SUCCESSFUL' });
      monitor.observe('dead', { key: 'k' });
      monitor.observe('invalid', { reason: 'unauthorized' });
      monitor.status(new StatusRateLimitError('EFB.1', 'blocked', 1));
      await monitor.checkInbox(reader);
    }
    expect({ clockReads, told: told.length, reads: reader.reads, timers: jest.getTimerCount() }).toEqual({
      clockReads: 0,
      told: 0,
      reads: 0,
      timers: 0,
    });
  });

  test('a listener added later starts from nothing: no failure before it counts', () => {
    const { monitor, told, state } = setup({}, false);
    for (let i = 0; i < 9; i += 1) monitor.attempt(false, 'k', 'e');
    state.listening = true;
    monitor.attempt(false, 'k', 'e');
    expect(told).toEqual([]);
  });
});
