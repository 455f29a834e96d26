/**
 * `ipn-kit`: receive mobile-money payment notifications (IPN) safely. The router (`ipnRouter`), the memory
 * store, the status client, the IPN address token and HMAC authenticator, the types your listeners, store
 * and logger are written against, and the errors to test with `instanceof`.
 * @packageDocumentation
 */
export { ipnRouter } from './router/ipn-router.js';
export type { IpnRouter } from './router/ipn-router.js';
export type { Options } from './config/options.js';
export type {
  IpnEvents,
  Notification,
  ListenerContext,
  InvalidEvent,
  ErrorEvent,
  DeadEvent,
  StaleEvent,
  ConflictEvent,
  AlertEvent,
} from './delivery/events.js';
export { alertWebhook, alertLogger } from './observability/alert-notifiers.js';
export type { RejectedEvent, StatusSource, VerifiedField } from './status/verify-notification.js';
export { ipnNotificationSchema } from './notification/schema.js';
export type { IpnNotification } from './notification/schema.js';
export { MemoryStore } from './stores/memory/memory-store.js';
export type { Store, DurableStore, InboxEntry } from './stores/store.js';
export type { ExpectationStore } from './stores/expectation-store.js';
export type { LifecycleStore } from './stores/lifecycle-store.js';
export type { Logger } from './observability/logger.js';
export { createStatusClient } from './status/status-client.js';
export type { StatusClient } from './status/status-client.js';
export type { StatusClientStats } from './status/query-guard.js';
export { ipnUrl } from './authenticate/ipn-url.js';
export { hmacAuthenticator } from './authenticate/hmac-authenticator.js';
export type { Authenticate } from './authenticate/authenticate.js';
export {
  IpnKitError,
  StoreError,
  ListenerError,
  CustomDataError,
  BodyUnavailableError,
  StatusError,
  TransactionNotFoundError,
  StatusQueryError,
  StatusRateLimitError,
  VerificationBusyError,
  VerificationError,
  DeliveryError,
  PurgeWindowError,
} from './shared/errors.js';
export type { IpnKitErrorCode } from './shared/errors.js';
