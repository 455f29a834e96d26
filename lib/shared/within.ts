/**
 * Rejects with `timeout()` when `pending` has not settled within `ms`; otherwise settles as it does. The
 * timer never keeps a closing process alive. What `pending` does later is ignored, so bound only calls
 * whose late outcome is safe to drop (or is dealt with by the caller).
 */
export function within<T>(pending: T | Promise<T>, ms: number, timeout: () => Error): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(timeout()), ms);
    timer.unref();
    Promise.resolve(pending)
      .then(resolve, reject)
      .finally(() => clearTimeout(timer));
  });
}
