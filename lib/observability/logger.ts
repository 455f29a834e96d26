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
 * or a request its answer. A method that returns a promise (an async transport) has its rejection caught
 * too: left alone, it would be an unhandled rejection, which ends the process by default.
 */
export function guardLogger(logger: Logger): Logger {
  const guard =
    (method: LogFn): LogFn =>
    (object, message) => {
      try {
        const result: unknown = method.call(logger, object, message);
        if (typeof (result as PromiseLike<unknown> | null)?.then === 'function') {
          Promise.resolve(result).catch(() => {}); // nowhere left to report it
        }
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
