/**
 * A log method: pino's `(object, message)` call shape.
 * @inline
 */
export type LogFn = (object: Record<string, unknown>, message: string) => void;

/** The subset of a pino (or pino-compatible) logger that ipn-kit uses. */
export interface Logger {
  /** Detail for following one request (quiet by default). */
  debug: LogFn;
  /** A normal event worth a line: a start, a recovery. */
  info: LogFn;
  /** Something went wrong that ipn-kit handled: a rejected request, a retry. */
  warn: LogFn;
  /** A failure that needs you: a store or listener error, a dead notification. */
  error: LogFn;
}

const noop: LogFn = () => {};

/**
 * Whether a log method is the default logger's quiet one (`debug` and `info` unless a logger is given): a
 * caller skips building the fields of a line nobody writes, on the path every request takes.
 */
export function isQuiet(method: LogFn): boolean {
  return method === noop;
}

/**
 * The default logger: `warn` and `error` lines go to stderr (`console.error`), one line each, such as
 * `[ipn-kit] WARN rejected an IPN request: unauthorized {"reason":"unauthorized","status":401}`; `debug` and
 * `info` are quiet. A message is written once: the fields leave out an error's (or a cause's) message that
 * the line already says. The stack is not on the line: ipn-kit logs it at `debug`, except for a bug of
 * ipn-kit's own (`IPN_INTERNAL`), whose line ends with it. The fields are the ones ipn-kit logs, already
 * redacted: the customer's number and name never appear unless `logCustomerData`.
 */
export const defaultLogger: Logger = {
  debug: noop,
  info: noop,
  warn: (object, message) => console.error(formatLine('WARN', object, message)),
  error: (object, message) => console.error(formatLine('ERROR', object, message)),
};

/**
 * One log line: prefix, level, message, the fields as JSON, and, for an error that is a bug of ipn-kit's
 * own (`IPN_INTERNAL`), the original stack on the lines after.
 */
export function formatLine(level: string, object: Record<string, unknown>, message: string): string {
  const fields = Object.keys(object).length === 0 ? '' : ` ${toJson(object, message)}`;
  const stack =
    level === 'ERROR' && codeOf(object.err) === 'IPN_INTERNAL' ? rootStack(object.err) : undefined;
  return `[ipn-kit] ${level} ${message}${fields}${stack === undefined ? '' : `\n${stack}`}`;
}

const codeOf = (err: unknown): unknown => (err as { code?: unknown } | null | undefined)?.code;

/**
 * The fields as JSON: errors as `{ type, code, message, cause }` (stacks apart), a message the line (or the
 * error it caused) already says left out; never a throw.
 */
function toJson(object: Record<string, unknown>, line: string): string {
  const seen = new WeakSet<object>();
  try {
    return JSON.stringify(object, (key, value: unknown) => {
      if (key === 'stack') return undefined;
      if (typeof value === 'bigint') return value.toString();
      if (value instanceof Error) {
        const { name, message, cause } = value;
        const code = (value as { code?: unknown }).code;
        return { type: name, code, message: line.includes(message) ? undefined : message, cause };
      }
      if (key === 'message' && typeof value === 'string' && line.includes(value)) return undefined;
      if (typeof value === 'object' && value !== null) {
        if (seen.has(value)) return '[circular]';
        seen.add(value);
      }
      return value;
    });
  } catch {
    return '{"fields":"(not printable)"}';
  }
}

/** The stack of the innermost cause of a logged error (where the failure began), if it has one. */
export function rootStack(err: unknown): string | undefined {
  let stack: string | undefined;
  let current = err;
  for (let depth = 0; depth < 8 && typeof current === 'object' && current !== null; depth += 1) {
    const { stack: own, cause } = current as { stack?: unknown; cause?: unknown };
    if (typeof own === 'string') stack = own;
    current = cause;
  }
  return stack;
}

/**
 * The user's logger, made unable to throw: a failing log sink must never cost a notification its events
 * or a request its answer. A method that returns a promise (an async sink) has its rejection caught, so it
 * never becomes an unhandled rejection that ends the process.
 */
export function guardLogger(logger: Logger): Logger {
  // A quiet method cannot throw: kept as it is, so that `isQuiet` still recognises it.
  const guard = (method: LogFn): LogFn =>
    method === noop
      ? noop
      : (object, message) => {
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

/**
 * The rule "an app with an `error` listener owns its errors": while `owned()` (the router has an `error`
 * listener, which receives every error ipn-kit reports), an error line goes to `debug`, so that the app's own
 * line is the only one. A dead notification's line (`event: 'dead'`) stays an error: it is a `dead` event,
 * not an `error` one; so does a failing `error` listener's (`event: 'error'`), which nothing else reports. Without a listener, errors are logged as they are.
 */
export function ownedErrors(logger: Logger, owned: () => boolean): Logger {
  return {
    ...logger,
    error: (object, message) =>
      owned() && object.event !== 'dead' && object.event !== 'error' && object.event !== 'invalid'
        ? logger.debug(object, message)
        : logger.error(object, message),
  };
}
