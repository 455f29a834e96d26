import { ListenerError } from '../../../lib/shared/errors.js';
import type { ErrorEvent, InvalidEvent } from '../../../lib/delivery/events.js';
import type { Logger } from '../../../lib/observability/logger.js';
import { createSafeEmitter } from '../../../lib/delivery/safe-emitter.js';
import { ipnNotificationSchema } from '../../../lib/notification/schema.js';
import type { IpnNotification } from '../../../lib/notification/schema.js';
import { failedPayload, successfulPayload } from '../../helpers/payloads.js';

const notification: IpnNotification = ipnNotificationSchema.parse(successfulPayload());
const other: IpnNotification = ipnNotificationSchema.parse(failedPayload());

/** Lets pending promise reactions and I/O callbacks run. */
function tick(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function setup() {
  const logger = { debug: jest.fn(), info: jest.fn(), warn: jest.fn(), error: jest.fn() } satisfies Logger;
  const router = { name: 'the router' };
  const { methods, emit } = createSafeEmitter<undefined>(logger, () => router);
  const errors: ErrorEvent[] = [];
  return {
    logger,
    router,
    methods,
    emit,
    errors,
    recordErrors: () => methods.on('error', (e) => errors.push(e)),
  };
}

describe('createSafeEmitter', () => {
  it('passes the payload to every listener, in the order they were added', () => {
    const { methods, emit } = setup();
    const calls: Array<[string, IpnNotification]> = [];
    methods.on('notification', (n) => calls.push(['first', n]));
    methods.on('notification', (n) => calls.push(['second', n]));
    expect(emit('notification', notification)).toBe(true);
    expect(calls).toEqual([
      ['first', notification],
      ['second', notification],
    ]);
    expect(calls[0]?.[1]).toBe(notification);
  });

  it('answers false when an event has no listener', () => {
    const { emit } = setup();
    expect(emit('notification', notification)).toBe(false);
  });

  it('runs the next listener after one throws, and emits exactly one error event for it', () => {
    const { methods, emit, errors, recordErrors } = setup();
    recordErrors();
    const cause = new Error('crediting failed');
    const next = jest.fn();
    methods.on('notification', () => {
      throw cause;
    });
    methods.on('notification', next);
    expect(() => emit('notification', notification)).not.toThrow();
    expect(next).toHaveBeenCalledTimes(1);
    expect(next).toHaveBeenCalledWith(notification);
    expect(errors).toHaveLength(1);
    const [event] = errors;
    expect(event?.error).toBeInstanceOf(ListenerError);
    expect(event?.error.code).toBe('IPN_LISTENER_FAILED');
    expect((event?.error as ListenerError).event).toBe('notification');
    expect(event?.error.cause).toBe(cause);
    expect(event?.error.message).toContain('crediting failed');
    expect(event?.notification).toBe(notification);
  });

  it('logs a throwing listener with the event and the notification id', () => {
    const { methods, emit, logger } = setup();
    methods.on('duplicate', () => {
      throw new Error('boom');
    });
    emit('duplicate', notification);
    expect(logger.error).toHaveBeenCalledTimes(1);
    expect(logger.error).toHaveBeenCalledWith(
      expect.objectContaining({
        err: expect.objectContaining({ type: 'ListenerError', code: 'IPN_LISTENER_FAILED' }),
        event: 'duplicate',
        transaction_id: 'EFB.001158',
        state: 'SUCCESSFUL',
      }),
      expect.stringContaining('boom'),
    );
  });

  it('reports a failing invalid listener without a notification', () => {
    const { methods, emit, errors, recordErrors } = setup();
    recordErrors();
    methods.on('invalid', () => {
      throw new Error('boom');
    });
    const invalid: InvalidEvent = { reason: 'malformed_body', status: 400, message: 'bad', received: '{' };
    emit('invalid', invalid);
    expect(errors).toHaveLength(1);
    expect((errors[0]?.error as ListenerError).event).toBe('invalid');
    expect(errors[0]?.notification).toBeUndefined();
  });

  // Jest fails a test in which a promise rejection goes unhandled, so these also prove there is none.
  describe('async listeners', () => {
    it('turns a rejected listener promise into an error event, not an unhandled rejection', async () => {
      const { methods, emit, errors, recordErrors, logger } = setup();
      recordErrors();
      const cause = new Error('database down');
      const next = jest.fn();
      methods.on('notification', () => Promise.reject(cause));
      methods.on('notification', next);
      emit('notification', notification);
      expect(next).toHaveBeenCalledTimes(1);
      await tick();
      await tick();
      expect(errors).toHaveLength(1);
      expect(errors[0]?.error).toBeInstanceOf(ListenerError);
      expect(errors[0]?.error.cause).toBe(cause);
      expect(errors[0]?.notification).toBe(notification);
      expect(logger.error).toHaveBeenCalledTimes(1);
    });

    it('emits nothing for an async listener that resolves', async () => {
      const { methods, emit, errors, recordErrors, logger } = setup();
      recordErrors();
      methods.on('notification', async () => {
        await Promise.resolve();
      });
      emit('notification', notification);
      await tick();
      expect(errors).toEqual([]);
      expect(logger.error).not.toHaveBeenCalled();
    });

    it('only logs a rejecting error listener', async () => {
      const { methods, emit, logger } = setup();
      const errorListener = jest.fn(() => Promise.reject(new Error('alerting down')));
      methods.on('error', errorListener);
      methods.on('notification', () => {
        throw new Error('boom');
      });
      emit('notification', notification);
      await tick();
      await tick();
      expect(errorListener).toHaveBeenCalledTimes(1);
      expect(logger.error).toHaveBeenCalledTimes(2);
      expect(logger.error).toHaveBeenLastCalledWith(
        expect.objectContaining({ event: 'error' }),
        expect.stringContaining('alerting down'),
      );
    });
  });

  it('only logs a throwing error listener, without calling it again', () => {
    const { methods, emit, logger } = setup();
    const errorListener = jest.fn(() => {
      throw new Error('alerting down');
    });
    methods.on('error', errorListener);
    methods.on('notification', () => {
      throw new Error('boom');
    });
    expect(() => emit('notification', notification)).not.toThrow();
    expect(errorListener).toHaveBeenCalledTimes(1);
    expect(logger.error).toHaveBeenCalledTimes(2);
    expect(logger.error).toHaveBeenLastCalledWith(
      expect.objectContaining({
        event: 'error',
        err: expect.objectContaining({ type: 'ListenerError', code: 'IPN_LISTENER_FAILED' }),
      }),
      expect.stringContaining('alerting down'),
    );
  });

  it('calls a once listener for the first emit only', () => {
    const { methods, emit } = setup();
    const listener = jest.fn();
    methods.once('notification', listener);
    emit('notification', notification);
    emit('notification', other);
    expect(listener).toHaveBeenCalledTimes(1);
    expect(listener).toHaveBeenCalledWith(notification);
    expect(methods.listenerCount('notification')).toBe(0);
  });

  it('isolates a throwing once listener too', () => {
    const { methods, emit, errors, recordErrors } = setup();
    recordErrors();
    methods.once('notification', () => {
      throw new Error('boom');
    });
    expect(() => emit('notification', notification)).not.toThrow();
    expect(errors).toHaveLength(1);
  });

  it('removes a listener by the function that was added', () => {
    const { methods, emit } = setup();
    const removed = jest.fn();
    const kept = jest.fn();
    methods.on('notification', removed);
    methods.on('notification', kept);
    methods.off('notification', removed);
    emit('notification', notification);
    expect(removed).not.toHaveBeenCalled();
    expect(kept).toHaveBeenCalledTimes(1);
    expect(methods.listeners('notification')).toEqual([kept]);
  });

  it('removes a once listener by the function that was added', () => {
    const { methods, emit } = setup();
    const listener = jest.fn();
    methods.once('notification', listener);
    methods.removeListener('notification', listener);
    emit('notification', notification);
    expect(listener).not.toHaveBeenCalled();
    expect(methods.listenerCount('notification')).toBe(0);
  });

  it('leaves other events alone when removing a listener', () => {
    const { methods } = setup();
    const listener = jest.fn();
    methods.on('notification', listener);
    methods.on('duplicate', listener);
    methods.off('notification', listener);
    expect(methods.listeners('duplicate')).toEqual([listener]);
  });

  it('removes every listener of an event when off is given no function', () => {
    const { methods, emit } = setup();
    const listener = jest.fn();
    methods.on('notification', listener);
    methods.on('notification', jest.fn());
    methods.on('duplicate', listener);
    methods.off('notification');
    emit('notification', notification);
    expect(listener).not.toHaveBeenCalled();
    expect(methods.listenerCount('notification')).toBe(0);
    expect(methods.listenerCount('duplicate')).toBe(1);
  });

  it('removes all listeners of every event with removeAllListeners', () => {
    const { methods } = setup();
    methods.on('notification', jest.fn());
    methods.on('duplicate', jest.fn());
    methods.removeAllListeners();
    expect(methods.eventNames()).toEqual([]);
  });

  it('lists the functions that were added, not wrappers', () => {
    const { methods } = setup();
    const first = jest.fn();
    const second = jest.fn();
    methods.on('notification', first);
    methods.once('notification', second);
    const listed = methods.listeners('notification');
    expect(listed).toHaveLength(2);
    expect(listed[0]).toBe(first);
    expect(listed[1]).toBe(second);
  });

  it('counts the listeners of an event', () => {
    const { methods } = setup();
    expect(methods.listenerCount('notification')).toBe(0);
    methods.on('notification', jest.fn());
    methods.addListener('notification', jest.fn());
    methods.on('duplicate', jest.fn());
    expect(methods.listenerCount('notification')).toBe(2);
    expect(methods.listenerCount('duplicate')).toBe(1);
    expect(methods.eventNames()).toEqual(['notification', 'duplicate']);
  });

  it('returns the router from every chaining method', () => {
    const { methods, router } = setup();
    const listener = jest.fn();
    expect(methods.on('notification', listener)).toBe(router);
    expect(methods.addListener('notification', listener)).toBe(router);
    expect(methods.once('notification', listener)).toBe(router);
    expect(methods.off('notification', listener)).toBe(router);
    expect(methods.removeListener('notification', listener)).toBe(router);
    expect(methods.removeAllListeners('notification')).toBe(router);
  });

  it('emitAndWait hands each failure back to the caller, with no error event and no log line of its own', async () => {
    const logger = { debug: jest.fn(), info: jest.fn(), warn: jest.fn(), error: jest.fn() } satisfies Logger;
    const { methods, emitAndWait } = createSafeEmitter<undefined>(logger, () => ({}));
    const errors: ErrorEvent[] = [];
    methods.on('error', (e) => void errors.push(e));
    const ran: string[] = [];
    methods.on('notification', () => {
      throw new Error('ledger down');
    });
    methods.on('notification', () => Promise.reject(new Error('queue full')));
    methods.on('notification', () => void ran.push('third'));

    const result = await emitAndWait('notification', notification);

    expect(result).toMatchObject({ listeners: 3, ok: false });
    expect(result.failures.map((failure) => failure.message)).toEqual([
      "a listener of 'notification' failed: ledger down",
      "a listener of 'notification' failed: queue full",
    ]);
    expect(result.failures[0]).toBeInstanceOf(ListenerError);
    expect(ran).toEqual(['third']);
    await tick();
    expect(errors).toEqual([]); // the caller reports the attempt, once
    expect(logger.error).not.toHaveBeenCalled();
  });

  describe('event names are checked at run time, as plain JavaScript calls them', () => {
    const KNOWN =
      "the events are 'successful', 'failed', 'notification', 'duplicate', 'invalid', 'error', 'rejected', 'stale', 'dead'";

    it.each([
      ['on', 'success', "ipn.on('success'): the router emits no such event (did you mean 'successful'?); "],
      [
        'once',
        'SUCCESSFUL',
        "ipn.once('SUCCESSFUL'): the router emits no such event (did you mean 'successful'?); ",
      ],
      [
        'addListener',
        'fail',
        "ipn.addListener('fail'): the router emits no such event (did you mean 'failed'?); ",
      ],
      ['prependListener', 'paid', "ipn.prependListener('paid'): the router emits no such event; "],
      [
        'prependOnceListener',
        'errors',
        "ipn.prependOnceListener('errors'): the router emits no such event (did you mean 'error'?); ",
      ],
    ])('%s(%j) throws a TypeError listing the known names', (method, event, start) => {
      const { methods } = setup();
      const call = () => (methods as any)[method](event, () => {});
      expect(call).toThrow(TypeError);
      expect(call).toThrow(start + KNOWN);
      expect(methods.eventNames()).toEqual([]);
    });

    it.each(['off', 'removeListener', 'removeAllListeners', 'listeners', 'listenerCount'])(
      '%s with an unknown name throws too',
      (method) => {
        const { methods } = setup();
        expect(() => (methods as any)[method]('sucessful', () => {})).toThrow(TypeError);
      },
    );

    it('a name that is not a string, or a listener that is not a function, throws a TypeError', () => {
      const { methods } = setup();
      expect(() => (methods as any).on(Symbol('successful'), () => {})).toThrow(
        'ipn.on(Symbol(successful)): the router emits no such event; ' + KNOWN,
      );
      expect(() => (methods as any).on('__proto__', () => {})).toThrow(TypeError);
      expect(() => (methods as any).on('successful')).toThrow(
        "ipn.on('successful', listener): the listener must be a function, got undefined",
      );
      expect(methods.eventNames()).toEqual([]);
    });

    it('removeAllListeners() without a name still removes everything', () => {
      const { methods } = setup();
      methods.on('successful', jest.fn());
      methods.on('failed', jest.fn());
      methods.removeAllListeners();
      expect(methods.eventNames()).toEqual([]);
    });
  });

  describe('prependListener and prependOnceListener', () => {
    it('run before the listeners already added; a prepended once listener runs once, others keep theirs', () => {
      const { methods, emit } = setup();
      const calls: string[] = [];
      methods.on('notification', () => void calls.push('on'));
      methods.once('notification', () => void calls.push('once'));
      methods.prependListener('notification', () => void calls.push('prepended'));
      methods.prependOnceListener('notification', () => void calls.push('prepended once'));

      emit('notification', notification);
      emit('notification', notification);

      expect(calls).toEqual(['prepended once', 'prepended', 'on', 'once', 'prepended', 'on']);
      expect(methods.listenerCount('notification')).toBe(2);
    });

    it('a prepended listener is isolated like the others, and off removes it', () => {
      const { methods, emit, errors, recordErrors } = setup();
      recordErrors();
      const later = jest.fn();
      const failing = () => {
        throw new Error('first one fails');
      };
      methods.on('notification', later);
      methods.prependListener('notification', failing);

      emit('notification', notification);
      methods.off('notification', failing);
      emit('notification', notification);

      expect(later).toHaveBeenCalledTimes(2);
      expect(errors).toHaveLength(1);
    });
  });
});

describe('track', () => {
  test('resolves once every listener the emits called has settled, the promises they returned included', async () => {
    const logger = { debug: jest.fn(), info: jest.fn(), warn: jest.fn(), error: jest.fn() } satisfies Logger;
    const { methods, emit, track } = createSafeEmitter<undefined>(logger, () => undefined);
    let finish: () => void = () => {};
    const done: string[] = [];
    methods.on('successful', async () => {
      await new Promise<void>((resolve) => (finish = resolve));
      done.push('slow');
    });
    methods.on('successful', () => void done.push('sync'));
    let settled = false;

    const tracked = track(() => emit('successful', notification as never)).then(() => (settled = true));
    await tick();
    expect([settled, done]).toEqual([false, ['sync']]);
    finish();
    await tracked;

    expect(done).toEqual(['sync', 'slow']);
  });

  test('never rejects: a listener that rejects is reported as error, and track still resolves', async () => {
    const logger = { debug: jest.fn(), info: jest.fn(), warn: jest.fn(), error: jest.fn() } satisfies Logger;
    const { methods, emit, track } = createSafeEmitter<undefined>(logger, () => undefined);
    const errors: unknown[] = [];
    methods.on('error', (e) => void errors.push(e.error));
    methods.on('failed', () => Promise.reject(new Error('ledger down')));

    await expect(track(() => emit('failed', other as never))).resolves.toBeUndefined();

    expect(errors).toEqual([expect.any(ListenerError)]);
  });

  test('resolves at once when no listener ran', async () => {
    const logger = { debug: jest.fn(), info: jest.fn(), warn: jest.fn(), error: jest.fn() } satisfies Logger;
    const { track } = createSafeEmitter<undefined>(logger, () => undefined);

    await expect(track(() => {})).resolves.toBeUndefined();
  });
});

describe('each emit carries how its listeners are watched, so no emit changes how another is', () => {
  function create() {
    const logger = { debug: jest.fn(), info: jest.fn(), warn: jest.fn(), error: jest.fn() } satisfies Logger;
    const emitter = createSafeEmitter<undefined>(logger, () => undefined);
    const errors: unknown[] = [];
    emitter.methods.on('error', (e) => void errors.push(e.error));
    return { ...emitter, errors };
  }
  /** A promise and the function that resolves it. */
  function gate() {
    let open: () => void = () => {};
    const opened = new Promise<void>((resolve) => (open = resolve));
    return { opened, open };
  }

  test('an emit made by a listener of an awaited emit is neither counted nor handed back: its failure is reported', async () => {
    const { methods, emit, emitAndWait, errors } = create();
    methods.on('failed', () => {
      throw new Error('ledger down');
    });
    methods.on('successful', () => void emit('failed', other as never));

    const result = await emitAndWait('successful', notification as never);

    expect(result).toEqual({ listeners: 1, ok: true, failures: [] });
    expect(errors).toEqual([expect.any(ListenerError)]);
  });

  test('an awaited emit inside track counts its own listeners only, and the emits after it are tracked', async () => {
    const { methods, emit, emitAndWait, track } = create();
    const slow = gate();
    methods.on('successful', () => {});
    methods.on('failed', () => slow.opened);
    let awaited: unknown;
    let settled = false;

    const tracked = track(() => {
      void Promise.resolve(emitAndWait('successful', notification as never)).then(
        (result) => (awaited = result),
      );
      emit('failed', other as never);
    }).then(() => (settled = true));
    await tick();

    expect(awaited).toEqual({ listeners: 1, ok: true, failures: [] });
    expect(settled).toBe(false);
    slow.open();
    await tracked;
    expect(settled).toBe(true);
  });

  test('a track whose run throws inside another leaves the outer one tracking its later emits', async () => {
    const { methods, emit, track } = create();
    const slow = gate();
    methods.on('failed', () => slow.opened);
    let settled = false;

    const tracked = track(() => {
      expect(() =>
        track(() => {
          throw new Error('a bug in run');
        }),
      ).toThrow('a bug in run');
      emit('failed', other as never);
    }).then(() => (settled = true));
    await tick();

    expect(settled).toBe(false);
    slow.open();
    await tracked;
    expect(settled).toBe(true);
  });

  test('after a track whose run threw, a plain emit is not tracked by it: its failure is still reported', async () => {
    const { methods, emit, track, errors } = create();
    methods.on('failed', () => Promise.reject(new Error('ledger down')));
    expect(() =>
      track(() => {
        throw new Error('a bug in run');
      }),
    ).toThrow('a bug in run');

    emit('failed', other as never);
    await tick();

    expect(errors).toEqual([expect.any(ListenerError)]);
  });

  test("the 'error' listeners a tracked failure calls are not waited for: their outcome is not the delivery's", async () => {
    const { methods, emit, track } = create();
    const slow = gate();
    methods.on('error', () => slow.opened);
    methods.on('failed', () => {
      throw new Error('ledger down');
    });

    let settled = false;
    void track(() => emit('failed', other as never)).then(() => (settled = true));
    await tick();

    expect(settled).toBe(true); // while the 'error' listener's promise is still pending
    slow.open();
  });
});
