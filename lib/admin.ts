/**
 * `ipn-kit/admin`: the operator's page for payment notifications, mounted in your app behind your login.
 * @packageDocumentation
 */
export { adminRouter } from './admin/admin-router.js';
export { adminFetchHandler } from './admin/admin-fetch.js';
export type { AdminOptions } from './admin/admin-options.js';
