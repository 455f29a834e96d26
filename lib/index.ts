export { ipnRouter } from './adapters/ipn-router.js';
export type { IpnRouter, CustomDataOf } from './adapters/ipn-router.js';
export type { IpnEmitter } from './delivery/safe-emitter.js';
export type { Inbox, ReconcileResult } from './delivery/delivery.js';
export type { IpnMetrics } from './observability/metrics.js';
export { MemoryStore } from './stores/memory-store.js';
export type { MemoryStoreOptions } from './stores/memory-store.js';
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
export { ipnNotificationSchema, FINAL_STATES } from './pipeline/schema.js';
export type { IpnNotification, FinalState } from './pipeline/schema.js';
export { createStatusClient } from './status/status-client.js';
export type { StatusClient, StatusClientOptions } from './status/status-client.js';
export type { StatusClientStats } from './status/query-guard.js';
export type { SharedGuard, SharedPermit } from './status/shared-guard.js';
export type { StatusRecord } from './status/status-envelope.js';
export type {
  StatusSource,
  RejectedEvent,
  RejectionReason,
  VerifiedField,
} from './status/verify-notification.js';
export { ipnUrl } from './pipeline/ipn-url.js';
export type {
  IpnEvents,
  IpnEventName,
  AttemptInfo,
  ListenerContext,
  ListenerContextOf,
  Notification,
  CustomDataFields,
  InvalidEvent,
  InvalidReason,
  ErrorEvent,
  DeadEvent,
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
  VerificationError,
  DeliveryError,
} from './pipeline/errors.js';
export type { FieldIssue, StatusQueryFailure } from './pipeline/errors.js';
