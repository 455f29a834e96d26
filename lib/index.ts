export { ipnRouter } from './ipn-router.js';
export type { IpnRouter, CustomDataOf } from './ipn-router.js';
export type { IpnEmitter } from './safe-emitter.js';
export { MemoryStore } from './memory-store.js';
export type { MemoryStoreOptions } from './memory-store.js';
export type { Store, Awaitable } from './store.js';
export type { Options } from './options.js';
export type { Logger, LogFn } from './logger.js';
export { ipnNotificationSchema, FINAL_STATES } from './schema.js';
export type { IpnNotification, FinalState } from './schema.js';
export type {
  IpnEvents,
  IpnEventName,
  Notification,
  CustomDataFields,
  InvalidEvent,
  InvalidReason,
  ErrorEvent,
} from './events.js';
export { IpnKitError, StoreError, ListenerError, CustomDataError, BodyUnavailableError } from './errors.js';
export type { FieldIssue } from './errors.js';
