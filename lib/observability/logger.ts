/** A log method: pino's `(object, message)` call shape. */
export type LogFn = (object: Record<string, unknown>, message: string) => void;

/** The subset of a pino (or pino-compatible) logger that ipn-kit uses. */
export interface Logger {
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
}

const noop: LogFn = () => {};

/** The default logger: quiet, except errors, which go to `console.error`. */
export const defaultLogger: Logger = {
  debug: noop,
  info: noop,
  warn: noop,
  error: (object, message) => console.error(`[ipn-kit] ${message}`, object),
};

/**
 * The user's logger, made unable to throw: a failing log sink must never cost a notification its events
 * or a request its answer. A method that returns a promise (an async sink) has its rejection caught, so it
 * never becomes an unhandled rejection that ends the process.
 */
export function guardLogger(logger: Logger): Logger {
  const guard =
    (method: LogFn): LogFn =>
    (object, message) => {
      try {
        const result: unknown = method.call(logger, object, message);
        if (isThenable(result)) Promise.resolve(result).catch(() => {});
      } catch {
        // Nowhere left to report it.
      }
    };
  return {
    debug: guard(logger.debug),
    info: guard(logger.info),
    warn: guard(logger.warn),
    error: guard(logger.error),
  };
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}
