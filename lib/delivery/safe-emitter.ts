import { EventEmitter } from 'eventemitter3';
import { IpnKitError, ListenerError, messageOf } from '../shared/errors.js';
import {
  IPN_EVENT_NAMES,
  isIpnEventName,
  type AttemptInfo,
  type IpnEventName,
  type IpnEvents,
  type ListenerContext,
} from './events.js';
import type { Logger } from '../observability/logger.js';
import { loggableError } from '../observability/redact.js';

type Events<C, X = ListenerContext> = IpnEvents<C, X>;
type Name<C> = keyof Events<C>;
type Wrapped = ((payload: unknown, context?: Attempt, watch?: Watch) => void) & {
  listener: (...args: never[]) => unknown;
};
type Listener = (payload: unknown, context?: Attempt) => unknown;

/** The payload of an `error` event, as a failing 'error' listener was handed it. */
type ErrorPayload = { error?: unknown; notification?: unknown };

/**
 * How the listeners of one emit are watched. It travels with the emit, as an argument to each listener's
 * wrapper, rather than in a flag of the emitter: nothing is left set for the next emit, whatever threw.
 * - `reported`: nobody waits; a failure is reported (an `error` event and a log line);
 * - `tracked`: for a `waitUntil`: the promises listeners return are collected, failures reported;
 * - `awaited`: an at-least-once attempt: every listener's outcome is collected, each failure handed back
 *   to the caller (which reports the attempt once) and not reported here.
 */
type Watch =
  | { readonly kind: 'reported' }
  | { readonly kind: 'tracked' | 'awaited'; readonly outcomes: Array<Promise<ListenerError | undefined>> };

const REPORTED: Watch = { kind: 'reported' };

/** The context the router passes to listeners at run time: a `tx` (and `db`) only inside a delivery transaction. */
export type Attempt = AttemptInfo & { tx?: unknown; db?: unknown };

/**
 * The listener methods of an IPN router; they mirror Node's and eventemitter3's and return the router for
 * chaining. An unknown event name (`'success'`, `'SUCCESSFUL'`) or a listener that is not a function throws a
 * `TypeError` listing the known names, in JavaScript as in TypeScript: a typo must not leave payments unheard.
 */
export interface IpnEmitter<C = undefined, X = ListenerContext> {
  /** Adds a listener of `event`; its payload is typed by the event's name. */
  on<E extends Name<C>>(event: E, listener: Events<C, X>[E]): this;
  /** The same as `on`. */
  addListener<E extends Name<C>>(event: E, listener: Events<C, X>[E]): this;
  /** Adds the listener before the ones already added, so it runs first. */
  prependListener<E extends Name<C>>(event: E, listener: Events<C, X>[E]): this;
  /** Adds a listener that runs for the next `event` only. */
  once<E extends Name<C>>(event: E, listener: Events<C, X>[E]): this;
  /** Adds a one-time listener before the ones already added. */
  prependOnceListener<E extends Name<C>>(event: E, listener: Events<C, X>[E]): this;
  /** Removes `listener` of `event`, or every listener of it when none is given. */
  off<E extends Name<C>>(event: E, listener?: Events<C, X>[E]): this;
  /** The same as `off`. */
  removeListener<E extends Name<C>>(event: E, listener?: Events<C, X>[E]): this;
  /** Removes every listener of `event`, or of every event when none is given. */
  removeAllListeners(event?: Name<C>): this;
  /** The listeners of `event`, as they were added. */
  listeners<E extends Name<C>>(event: E): Array<Events<C, X>[E]>;
  /** How many listeners `event` has. */
  listenerCount(event: Name<C>): number;
  /** The events that have at least one listener. */
  eventNames(): Array<Name<C>>;
}

/** Emits an event to every listener, each isolated; answers whether there was any. */
export type Emit<C> = <E extends Name<C>>(
  event: E,
  payload: Parameters<Events<C>[E]>[0],
  context?: Attempt,
) => boolean;

/** Runs code that emits; resolves once every listener it called has settled. Never rejects. */
export type Track = (run: () => void) => Promise<void>;

/**
 * Emits, then waits for every listener: how many ran, whether all of them succeeded, and each failure (at
 * once when there is nothing to wait for, else a promise of it). The failures are not reported (no `error`
 * event, no log line): the caller reports the attempt once.
 */
export type EmitAndWait<C> = <E extends Name<C>>(
  event: E,
  payload: Parameters<Events<C>[E]>[0],
  context?: Attempt,
) => Emitted | Promise<Emitted>;

/** What an awaited emit came to: how many listeners ran, whether all succeeded, and each failure. */
interface Emitted {
  listeners: number;
  ok: boolean;
  failures: ListenerError[];
}

/**
 * An eventemitter3 emitter whose listeners cannot hurt the caller: each one runs in isolation, and a throw
 * or a rejected promise becomes an `error` event (and an error log) instead of an exception or an unhandled
 * rejection. The other listeners still run. `observe` sees every event emitted (for counters), listener
 * failures included, and whether it was emitted to be awaited (an at-least-once attempt).
 */
export function createSafeEmitter<C>(
  logger: Logger,
  self: () => unknown,
  observe: (event: string, payload: unknown, awaited: boolean) => void = () => {},
  redact = true,
) {
  const emitter = new EventEmitter();
  /** Each reported listener failure, and the payload its listener was given (for {@link handlingOf}). */
  const sources = new WeakMap<object, unknown>();
  /**
   * The watch of the emits that `track`'s `run` makes, set only while it runs (its code is the caller's,
   * which emits through `emit`): the one scope left, and `track` alone sets and clears it.
   */
  let tracking: Watch | undefined;

  const report = (event: string, cause: unknown, payload: unknown): void => {
    try {
      reportFailure(event, cause, payload);
    } catch {
      // Nothing in it should throw; if a bug of ours does, the next listener must still run.
    }
  };
  /**
   * What a failing 'error' listener was handling, in words, as clear as the log allows: scrubbed of the
   * customer's details of the notification (or the rejected request) it came from, as its own line was.
   */
  const handlingOf = ({ error, notification }: ErrorPayload): string => {
    if (!redact || !(error instanceof IpnKitError)) return messageOf(error);
    const { message } = loggableError(error, sources.get(error) ?? notification);
    return typeof message === 'string' ? message : '';
  };
  const reportFailure = (event: string, cause: unknown, payload: unknown): void => {
    const error = new ListenerError(event, cause);
    // A failing 'invalid' listener's error goes to 'error' without the request it quotes: kept to scrub it.
    sources.set(error, payload);
    const err = redact ? loggableError(error, payload) : error;
    // A failing 'error' listener did not log what it was handed (an app's error listener owns its errors,
    // which ipn-kit then logs at debug only): its line names that error too.
    const handed = event === 'error' ? { handling: handlingOf(payload as ErrorPayload) } : {};
    logger.error(
      { err, event, ...identify(payload), ...handed },
      redact ? (err.message as string) : error.message,
    );
    // A failing 'error' listener is only logged: reporting it through 'error' again could loop.
    if (event !== 'error') {
      const failure = { error, notification: event === 'invalid' ? undefined : payload };
      observe('error', failure, false);
      // Reported: the 'error' listeners' own outcome is not the delivery's, nor waited for.
      emitter.emit('error', failure, undefined, REPORTED);
    }
  };
  /** The listener, isolated; a one-time one removes itself before it runs (so a prepend keeps it one-time). */
  /**
   * A listener's failure: handed back when the emit is awaited (an at-least-once attempt, which the caller
   * reports once), otherwise (tracked for a `waitUntil`, or not awaited) reported here.
   */
  const failed = (
    event: string,
    cause: unknown,
    payload: unknown,
    watch: Watch,
  ): ListenerError | undefined => {
    if (watch.kind === 'awaited') return new ListenerError(event, cause);
    report(event, cause, payload);
    return undefined;
  };
  const wrap = (event: string, listener: Listener, once = false): Wrapped => {
    const wrapped: Wrapped = Object.assign(
      (payload: unknown, context?: Attempt, watch: Watch = REPORTED): void => {
        if (once) emitter.off(event, wrapped);
        try {
          // Only the notification events carry a context: the others' listeners get their payload alone.
          const result = context === undefined ? listener(payload) : listener(payload, context);
          if (isThenable(result)) {
            const settled = Promise.resolve(result).then(
              () => undefined,
              (cause: unknown) => failed(event, cause, payload, watch),
            );
            if (watch.kind !== 'reported') watch.outcomes.push(settled);
          } else if (watch.kind === 'awaited') {
            // Every listener counts in an attempt; a tracked one that returned nothing has nothing to wait for.
            watch.outcomes.push(SUCCEEDED);
          }
        } catch (cause) {
          const failure = failed(event, cause, payload, watch);
          if (watch.kind !== 'reported') watch.outcomes.push(Promise.resolve(failure));
        }
      },
      { listener },
    );
    return wrapped;
  };
  const add = (method: string, event: unknown, listener: unknown, once: boolean, first: boolean): void => {
    checkEvent(method, event);
    if (typeof listener !== 'function') {
      throw new TypeError(
        `ipn.${method}('${event}', listener): the listener must be a function, got ${typeof listener}`,
      );
    }
    const wrapped = wrap(event, listener as Listener, once);
    if (!first) {
      emitter.on(event, wrapped);
      return;
    }
    const existing = emitter.listeners(event) as Wrapped[];
    emitter.removeAllListeners(event);
    for (const item of [wrapped, ...existing]) emitter.on(event, item);
  };
  const find = (event: string, listener: unknown) =>
    (emitter.listeners(event) as Wrapped[]).filter((wrapped) => wrapped.listener === listener);

  const methods: IpnEmitter<C> = {
    on(event, listener) {
      add('on', event, listener, false, false);
      return self() as never;
    },
    addListener(event, listener) {
      add('addListener', event, listener, false, false);
      return self() as never;
    },
    prependListener(event, listener) {
      add('prependListener', event, listener, false, true);
      return self() as never;
    },
    once(event, listener) {
      add('once', event, listener, true, false);
      return self() as never;
    },
    prependOnceListener(event, listener) {
      add('prependOnceListener', event, listener, true, true);
      return self() as never;
    },
    off(event, listener) {
      checkEvent('off', event);
      if (listener === undefined) emitter.removeAllListeners(event);
      else for (const wrapped of find(event, listener)) emitter.off(event, wrapped);
      return self() as never;
    },
    removeListener(event, listener) {
      checkEvent('removeListener', event);
      return methods.off(event, listener);
    },
    removeAllListeners(event) {
      if (event !== undefined) checkEvent('removeAllListeners', event);
      emitter.removeAllListeners(event);
      return self() as never;
    },
    listeners: (event) => {
      checkEvent('listeners', event);
      return (emitter.listeners(event) as Wrapped[]).map((wrapped) => wrapped.listener as never);
    },
    listenerCount: (event) => {
      checkEvent('listenerCount', event);
      return emitter.listenerCount(event);
    },
    eventNames: () => emitter.eventNames() as never,
  };
  const emit: Emit<C> = (event, payload, context) => {
    observe(event, payload, false);
    return emitter.emit(event, payload, context, tracking ?? REPORTED);
  };
  /**
   * Emits, then waits for every listener (and the promise each returns). Gives how many listeners ran,
   * whether all of them succeeded, and each failure, which is handed back rather than reported: at once
   * when no listener returned a promise or threw (nothing to wait for), else as a promise.
   */
  const emitAndWait: EmitAndWait<C> = (event, payload, context) => {
    // Every listener counts here, inside a `track` too: this watch is this emit's alone.
    const outcomes: Array<Promise<ListenerError | undefined>> = [];
    observe(event, payload, true);
    emitter.emit(event, payload, context, { kind: 'awaited', outcomes } satisfies Watch);
    if (outcomes.every((outcome) => outcome === SUCCEEDED)) {
      return { listeners: outcomes.length, ok: true, failures: [] };
    }
    return Promise.all(outcomes).then((results) => {
      const failures = results.filter((failure): failure is ListenerError => failure !== undefined);
      return { listeners: results.length, ok: failures.length === 0, failures };
    });
  };
  /**
   * Runs `run` (which emits) and resolves once every listener it called has settled, the promises they
   * returned included. Never rejects: a listener's failure is reported as usual. For a `waitUntil`.
   */
  const track = (run: () => void): Promise<void> => {
    const outcomes: Array<Promise<ListenerError | undefined>> = [];
    const outer = tracking; // a `track` inside `run` watches its own emits, then this one's again
    tracking = { kind: 'tracked', outcomes };
    try {
      run();
    } finally {
      tracking = outer;
    }
    return outcomes.length === 0 ? SETTLED : Promise.all(outcomes).then(() => undefined);
  };
  /** Whether the app listens for `event` now (an app with an `error` listener owns its errors). */
  const listens = (event: IpnEventName): boolean => emitter.listenerCount(event) > 0;
  return { methods, emit, emitAndWait, track, listens };
}

/** What `track` gives when nothing it ran returned a promise: one settled promise, shared. */
export const SETTLED: Promise<void> = Promise.resolve();
const SUCCEEDED: Promise<undefined> = Promise.resolve(undefined);

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

/** Which notification a log line is about, without the customer's details. */
export function identify(payload: unknown): { transaction_id?: unknown; state?: unknown } {
  if (typeof payload !== 'object' || payload === null) return {};
  const { transaction_id, state } = payload as Record<string, unknown>;
  return { transaction_id, state };
}

/** Throws a `TypeError` for an event name the router never emits, naming the known ones. */
function checkEvent(method: string, event: unknown): asserts event is IpnEventName {
  if (isIpnEventName(event)) return;
  const shown = typeof event === 'string' ? `'${event}'` : messageOf(event);
  const near = typeof event === 'string' ? nearest(event) : undefined;
  throw new TypeError(
    `ipn.${method}(${shown}): the router emits no such event${near ? ` (did you mean '${near}'?)` : ''}; ` +
      `the events are ${IPN_EVENT_NAMES.map((name) => `'${name}'`).join(', ')}`,
  );
}

/** The known name a typo most likely meant: the same in another case, or one that starts like it. */
function nearest(event: string): IpnEventName | undefined {
  const typed = event.toLowerCase();
  if (typed.length < 3) return undefined;
  return IPN_EVENT_NAMES.find((name) => name === typed || name.startsWith(typed) || typed.startsWith(name));
}
