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

/**
 * Whether the code runs inside `next build` (Next.js sets `NEXT_PHASE` to `'phase-production-build'` while
 * it imports route modules to collect their configuration). A router built there never serves: the runtime
 * process (`next start`, a serverless function) imports the module again, and that router starts its work.
 */
export function isNextBuild(): boolean {
  try {
    const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
    return env?.NEXT_PHASE === 'phase-production-build';
  } catch {
    // Deno without --allow-env throws on the read: not a Next.js build, and no reason to refuse to start.
    return false;
  }
}
