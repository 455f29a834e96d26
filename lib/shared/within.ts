/**
 * Rejects with `timeout()` when `pending` has not settled within `ms`; otherwise settles as it does. The
 * timer never keeps a closing process alive. What `pending` does later is ignored, so bound only calls
 * whose late outcome is safe to drop (or is dealt with by the caller).
 */
export function within<T>(pending: T | Promise<T>, ms: number, timeout: () => Error): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(timeout()), ms);
    timer.unref();
    // Two callbacks rather than `.finally()`: this runs for every store call, and each promise counts.
    Promise.resolve(pending).then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passed on as it came
        reject(error);
      },
    );
  });
}
