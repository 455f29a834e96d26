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
  /** Adds a listener of `event`; its payload is typed by the event's name. */
  on<E extends Name<C>>(event: E, listener: Events<C>[E]): this;
  /** The same as {@link IpnEmitter.on}. */
  addListener<E extends Name<C>>(event: E, listener: Events<C>[E]): this;
  /** Adds a listener that runs for the next `event` only. */
  once<E extends Name<C>>(event: E, listener: Events<C>[E]): this;
  /** Removes `listener` of `event`, or every listener of it when none is given. */
  off<E extends Name<C>>(event: E, listener?: Events<C>[E]): this;
  /** The same as {@link IpnEmitter.off}. */
  removeListener<E extends Name<C>>(event: E, listener?: Events<C>[E]): this;
  /** Removes every listener of `event`, or of every event when none is given. */
  removeAllListeners(event?: Name<C>): this;
  /** The listeners of `event`, as they were added. */
  listeners<E extends Name<C>>(event: E): Array<Events<C>[E]>;
  /** How many listeners `event` has. */
  listenerCount(event: Name<C>): number;
  /** The events that have at least one listener. */
  eventNames(): Array<Name<C>>;
}

/** Emits an event to every listener, each isolated; answers whether there was any. */
export type Emit<C> = <E extends Name<C>>(event: E, payload: Parameters<Events<C>[E]>[0]) => boolean;

/**
 * Emits, then waits for every listener: how many ran, whether all of them succeeded, and each failure. The
 * failures are not reported (no `error` event, no log line): the caller reports the attempt once.
 */
export type EmitAndWait<C> = <E extends Name<C>>(
  event: E,
  payload: Parameters<Events<C>[E]>[0],
) => Promise<{ listeners: number; ok: boolean; failures: ListenerError[] }>;

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
  /** Set while `emitAndWait` emits: each listener called adds its failure, or `undefined` when it succeeded. */
  let collecting: Array<Promise<ListenerError | undefined>> | undefined;

  const report = (event: string, cause: unknown, payload: unknown): void => {
    try {
      reportFailure(event, cause, payload);
    } catch {
      // Nothing in it should throw; if a bug of ours does, the next listener must still run.
    }
  };
  const reportFailure = (event: string, cause: unknown, payload: unknown): void => {
    const error = new ListenerError(event, cause);
    const err = redact ? loggableError(error, payload) : error;
    logger.error({ err, event, ...identify(payload) }, redact ? (err.message as string) : error.message);
    // A failing 'error' listener is only logged: reporting it through 'error' again could loop.
    if (event !== 'error') {
      const outer = collecting;
      collecting = undefined; // the 'error' listeners' own outcome is not the delivery's
      try {
        const failure = { error, notification: event === 'invalid' ? undefined : payload };
        observe('error', failure, false);
        emitter.emit('error', failure);
      } finally {
        collecting = outer;
      }
    }
  };
  const wrap = (event: string, listener: (payload: unknown) => unknown): Wrapped =>
    Object.assign(
      (payload: unknown): void => {
        const outcomes = collecting;
        // Awaited (an at-least-once attempt): the failure goes back to the caller, which reports the attempt
        // once; otherwise it is reported here.
        const fail = (cause: unknown): ListenerError | undefined => {
          if (outcomes) return new ListenerError(event, cause);
          report(event, cause, payload);
          return undefined;
        };
        try {
          const result = listener(payload);
          if (isThenable(result)) {
            const settled = Promise.resolve(result).then(() => undefined, fail);
            outcomes?.push(settled);
          } else outcomes?.push(Promise.resolve(undefined));
        } catch (cause) {
          const failure = fail(cause);
          outcomes?.push(Promise.resolve(failure));
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
    const outcomes: Array<Promise<ListenerError | undefined>> = [];
    collecting = outcomes;
    try {
      observe(event, payload, true);
      emitter.emit(event, payload);
    } finally {
      collecting = outer;
    }
    const results = await Promise.all(outcomes);
    const failures = results.filter((failure): failure is ListenerError => failure !== undefined);
    return { listeners: results.length, ok: failures.length === 0, failures };
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
