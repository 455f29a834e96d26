export { ipnRouter } from './router/ipn-router.js';
export type { IpnRouter, CustomDataOf } from './router/ipn-router.js';
export type { FetchContext, FetchHandler } from './router/fetch-handler.js';
export type { IpnEmitter } from './delivery/safe-emitter.js';
export type {
  StandardSchemaV1,
  StandardSchemaProps,
  StandardResult,
  StandardSuccess,
  StandardFailure,
  StandardPathSegment,
  StandardIssue,
  StandardTypes,
  StandardOutput,
} from './notification/standard-schema.js';
export type { Inbox, ReconcileResult } from './delivery/delivery.js';
export type { ExpectOptions } from './delivery/expectations.js';
export type { SweepResult } from './delivery/reconcile-sweep.js';
export type { Expectation, ExpectationStore } from './stores/expectation-store.js';
export type { IpnMetrics } from './observability/metrics.js';
export { MemoryStore } from './stores/memory-store.js';
export type { MemoryStoreOptions } from './stores/memory-store.js';
export type { MemoryExpectations } from './stores/memory-expectations.js';
export type {
  Store,
  DurableStore,
  Awaitable,
  DeliveryStatus,
  InboxEntry,
  Lease,
  Settlement,
  DeliveryTransaction,
  ListOptions,
  StatusCounts,
} from './stores/store.js';
export type { Options } from './config/options.js';
export type { Logger, LogFn } from './observability/logger.js';
export { ipnNotificationSchema, FINAL_STATES } from './notification/schema.js';
export type {
  IpnNotification,
  IpnListedFields,
  IpnExtra,
  IpnExtraFields,
  FinalState,
} from './notification/schema.js';
export { createStatusClient } from './status/status-client.js';
export type { StatusClient, StatusClientOptions } from './status/status-client.js';
export type { StatusCheck, StatusCheckOptions, StatusCheckVerdict } from './status/status-check.js';
export type { StatusClientStats, StatusQueryOptions } from './status/query-guard.js';
export type { SharedGuard, SharedPermit } from './status/shared-guard.js';
export type { StatusRecord } from './status/status-envelope.js';
export type {
  StatusSource,
  RejectedEvent,
  RejectionReason,
  VerifiedField,
} from './status/verify-notification.js';
export { ipnUrl } from './authenticate/ipn-url.js';
export { hmacAuthenticator } from './authenticate/hmac-authenticator.js';
export type { HmacOptions } from './authenticate/hmac-authenticator.js';
export type { Authenticate, AuthenticateInput } from './authenticate/authenticate.js';
export type {
  IpnEvents,
  IpnEventName,
  AttemptInfo,
  ListenerContext,
  ListenerContextOf,
  TransactionalStore,
  Notification,
  CustomDataFields,
  InvalidEvent,
  InvalidReason,
  ErrorEvent,
  DeadEvent,
  StaleEvent,
  StaleReason,
} from './delivery/events.js';
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
} from './shared/errors.js';
export type { FieldIssue, StatusQueryFailure, IpnKitErrorCode, StatusErrorCode } from './shared/errors.js';
