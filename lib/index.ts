export { ipnRouter } from './ipn-router.js';
export type { IpnRouter, CustomDataOf } from './ipn-router.js';
export type { IpnEmitter } from './safe-emitter.js';
export type { Inbox, ReconcileResult } from './delivery.js';
export type { IpnMetrics } from './metrics.js';
export { MemoryStore } from './memory-store.js';
export type { MemoryStoreOptions } from './memory-store.js';
export type {
  Store,
  DurableStore,
  Awaitable,
  DeliveryStatus,
  InboxEntry,
  Lease,
  Settlement,
  ListOptions,
} from './store.js';
export type { Options } from './options.js';
export type { Logger, LogFn } from './logger.js';
export { ipnNotificationSchema, FINAL_STATES } from './schema.js';
export type { IpnNotification, FinalState } from './schema.js';
export { createStatusClient } from './status-client.js';
export type { StatusClient, StatusClientOptions } from './status-client.js';
export type { StatusClientStats } from './query-guard.js';
export type { StatusRecord } from './status-envelope.js';
export type { StatusSource, RejectedEvent, RejectionReason, VerifiedField } from './verify-notification.js';
export { ipnUrl } from './ipn-url.js';
export type {
  IpnEvents,
  IpnEventName,
  Notification,
  CustomDataFields,
  InvalidEvent,
  InvalidReason,
  ErrorEvent,
  DeadEvent,
} from './events.js';
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
} from './errors.js';
export type { FieldIssue, StatusQueryFailure } from './errors.js';
