import { EventEmitter } from 'eventemitter3';
import { ListenerError } from '../pipeline/errors.js';
import type { AttemptInfo, IpnEvents, ListenerContext } from './events.js';
import type { Logger } from '../observability/logger.js';
import { loggableError } from '../observability/redact.js';

type Events<C, X = ListenerContext> = IpnEvents<C, X>;
type Name<C> = keyof Events<C>;
type Wrapped = ((payload: unknown, context?: Attempt) => void) & { listener: (...args: never[]) => unknown };

/** The context the router passes to listeners at run time: a `db` only inside a delivery transaction. */
export type Attempt = AttemptInfo & { db?: unknown };

/** The listener methods of an IPN router; they mirror eventemitter3's and return the router for chaining. */
export interface IpnEmitter<C = undefined, X = ListenerContext> {
  on<E extends Name<C>>(event: E, listener: Events<C, X>[E]): this;
  addListener<E extends Name<C>>(event: E, listener: Events<C, X>[E]): this;
  once<E extends Name<C>>(event: E, listener: Events<C, X>[E]): this;
  off<E extends Name<C>>(event: E, listener?: Events<C, X>[E]): this;
  removeListener<E extends Name<C>>(event: E, listener?: Events<C, X>[E]): this;
  removeAllListeners(event?: Name<C>): this;
  listeners<E extends Name<C>>(event: E): Array<Events<C, X>[E]>;
  listenerCount(event: Name<C>): number;
  eventNames(): Array<Name<C>>;
}

/** Emits an event to every listener, each isolated; answers whether there was any. */
export type Emit<C> = <E extends Name<C>>(
  event: E,
  payload: Parameters<Events<C>[E]>[0],
  context?: Attempt,
) => boolean;

/** Emits, then waits for every listener: how many ran, and whether all of them succeeded. */
export type EmitAndWait<C> = <E extends Name<C>>(
  event: E,
  payload: Parameters<Events<C>[E]>[0],
  context?: Attempt,
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
  const wrap = (event: string, listener: (payload: unknown, context?: Attempt) => unknown): Wrapped =>
    Object.assign(
      (payload: unknown, context?: Attempt): void => {
        const outcomes = collecting;
        try {
          // Only the notification events carry a context: the others' listeners get their payload alone.
          const result = context === undefined ? listener(payload) : listener(payload, context);
          if (isThenable(result)) {
            const settled = Promise.resolve(result).then(
              () => true,
              (cause: unknown) => report(event, cause, payload),
            );
            outcomes?.push(settled);
          } else outcomes?.push(Promise.resolve(true));
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
  const emit: Emit<C> = (event, payload, context) => {
    observe(event, payload, false);
    return emitter.emit(event, payload, context);
  };
  /**
   * Emits, then waits for every listener (and the promise each returns). Resolves how many listeners ran
   * and whether all of them succeeded; failures are reported as usual.
   */
  const emitAndWait: EmitAndWait<C> = async (event, payload, context) => {
    const outer = collecting;
    const outcomes: Array<Promise<boolean>> = [];
    collecting = outcomes;
    try {
      observe(event, payload, true);
      emitter.emit(event, payload, context);
    } finally {
      collecting = outer;
    }
    const results = await Promise.all(outcomes);
    return { listeners: results.length, ok: results.every(Boolean) };
  };
  return { methods, emit, emitAndWait };
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

/** Which notification a log line is about, without the customer's details. */
export function identify(payload: unknown): { transaction_id?: unknown; state?: unknown } {
  if (typeof payload !== 'object' || payload === null) return {};
  const { transaction_id, state } = payload as Record<string, unknown>;
  return { transaction_id, state };
}
