import { EventEmitter } from 'eventemitter3';
import { ListenerError } from '../pipeline/errors.js';
import type { IpnEvents } from './events.js';
import type { Logger } from '../observability/logger.js';
import { loggableError } from '../observability/redact.js';

type Events<C> = IpnEvents<C>;
type Name<C> = keyof Events<C>;
type Wrapped = ((payload: unknown) => void) & { listener: (...args: never[]) => unknown };

/** The listener methods of an IPN router; they mirror eventemitter3's and return the router for chaining. */
export interface IpnEmitter<C = undefined> {
  on<E extends Name<C>>(event: E, listener: Events<C>[E]): this;
  addListener<E extends Name<C>>(event: E, listener: Events<C>[E]): this;
  once<E extends Name<C>>(event: E, listener: Events<C>[E]): this;
  off<E extends Name<C>>(event: E, listener?: Events<C>[E]): this;
  removeListener<E extends Name<C>>(event: E, listener?: Events<C>[E]): this;
  removeAllListeners(event?: Name<C>): this;
  listeners<E extends Name<C>>(event: E): Array<Events<C>[E]>;
  listenerCount(event: Name<C>): number;
  eventNames(): Array<Name<C>>;
}

/** Emits an event to every listener, each isolated; answers whether there was any. */
export type Emit<C> = <E extends Name<C>>(event: E, payload: Parameters<Events<C>[E]>[0]) => boolean;

/** Runs code that emits; resolves once every listener it called has settled. Never rejects. */
export type Track = (run: () => void) => Promise<void>;

/** Emits, then waits for every listener: how many ran, and whether all of them succeeded. */
export type EmitAndWait<C> = <E extends Name<C>>(
  event: E,
  payload: Parameters<Events<C>[E]>[0],
) => Promise<{ listeners: number; ok: boolean }>;

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
  /** Set while `emitAndWait` emits: each listener called adds whether it succeeded. */
  let collecting: Array<Promise<boolean>> | undefined;
  /** Set while `track` runs: only the promises listeners return matter, not a count of listeners. */
  let pendingOnly = false;

  const report = (event: string, cause: unknown, payload: unknown): false => {
    const error = new ListenerError(event, cause);
    const err = redact ? loggableError(error, payload) : error;
    logger.error({ err, event, ...identify(payload) }, redact ? (err.message as string) : error.message);
    // A failing 'error' listener is only logged: reporting it through 'error' again could loop.
    if (event !== 'error') {
      const outer = collecting;
      collecting = undefined; // the 'error' listeners' own outcome is not the delivery's
      const failure = { error, notification: event === 'invalid' ? undefined : payload };
      observe('error', failure, false);
      emitter.emit('error', failure);
      collecting = outer;
    }
    return false;
  };
  const wrap = (event: string, listener: (payload: unknown) => unknown): Wrapped =>
    Object.assign(
      (payload: unknown): void => {
        const outcomes = collecting;
        try {
          const result = listener(payload);
          if (isThenable(result)) {
            const settled = Promise.resolve(result).then(
              () => true,
              (cause: unknown) => report(event, cause, payload),
            );
            outcomes?.push(settled);
          } else if (!pendingOnly) outcomes?.push(Promise.resolve(true));
        } catch (cause) {
          const failed = report(event, cause, payload);
          outcomes?.push(Promise.resolve(failed));
        }
      },
      { listener },
    );
  const find = (event: string, listener: unknown) =>
    (emitter.listeners(event) as Wrapped[]).filter((wrapped) => wrapped.listener === listener);

  const methods: IpnEmitter<C> = {
    on(event, listener) {
      emitter.on(event, wrap(event, listener as never));
      return self() as never;
    },
    addListener(event, listener) {
      return methods.on(event, listener);
    },
    once(event, listener) {
      emitter.once(event, wrap(event, listener as never));
      return self() as never;
    },
    off(event, listener) {
      if (listener === undefined) emitter.removeAllListeners(event);
      else for (const wrapped of find(event, listener)) emitter.off(event, wrapped);
      return self() as never;
    },
    removeListener(event, listener) {
      return methods.off(event, listener);
    },
    removeAllListeners(event) {
      emitter.removeAllListeners(event);
      return self() as never;
    },
    listeners: (event) => (emitter.listeners(event) as Wrapped[]).map((wrapped) => wrapped.listener as never),
    listenerCount: (event) => emitter.listenerCount(event),
    eventNames: () => emitter.eventNames() as never,
  };
  const emit: Emit<C> = (event, payload) => {
    observe(event, payload, false);
    return emitter.emit(event, payload);
  };
  /**
   * Emits, then waits for every listener (and the promise each returns). Resolves how many listeners ran
   * and whether all of them succeeded; failures are reported as usual.
   */
  const emitAndWait: EmitAndWait<C> = async (event, payload) => {
    const outer = collecting;
    const outerPendingOnly = pendingOnly;
    const outcomes: Array<Promise<boolean>> = [];
    collecting = outcomes;
    pendingOnly = false; // every listener counts here
    try {
      observe(event, payload, true);
      emitter.emit(event, payload);
    } finally {
      collecting = outer;
      pendingOnly = outerPendingOnly;
    }
    const results = await Promise.all(outcomes);
    return { listeners: results.length, ok: results.every(Boolean) };
  };
  /**
   * Runs `run` (which emits) and resolves once every listener it called has settled, the promises they
   * returned included. Never rejects: a listener's failure is reported as usual. For a `waitUntil`.
   */
  const track = (run: () => void): Promise<void> => {
    const outer = collecting;
    const outerPendingOnly = pendingOnly;
    const outcomes: Array<Promise<boolean>> = [];
    collecting = outcomes;
    pendingOnly = true; // a listener that returned nothing is done: nothing to allocate for it
    try {
      run();
    } finally {
      collecting = outer;
      pendingOnly = outerPendingOnly;
    }
    return outcomes.length === 0 ? SETTLED : Promise.all(outcomes).then(() => undefined);
  };
  return { methods, emit, emitAndWait, track };
}

const SETTLED: Promise<void> = Promise.resolve();

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

/** Which notification a log line is about, without the customer's details. */
export function identify(payload: unknown): { transaction_id?: unknown; state?: unknown } {
  if (typeof payload !== 'object' || payload === null) return {};
  const { transaction_id, state } = payload as Record<string, unknown>;
  return { transaction_id, state };
}
