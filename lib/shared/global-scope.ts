/**
 * Whether the code runs on Cloudflare Workers (workerd), by its documented marker: `navigator.userAgent` is
 * `'Cloudflare-Workers'`. There, asynchronous I/O, timers and random values throw outside a request's
 * handler ("Disallowed operation called within global scope"), a microtask queued while the module is
 * evaluated included: it runs before any request exists.
 */
export function isCloudflareWorkers(): boolean {
  const navigator = (globalThis as { navigator?: { userAgent?: unknown } }).navigator;
  return navigator?.userAgent === 'Cloudflare-Workers';
}
