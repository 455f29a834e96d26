/**
 * `ipn-kit/testing`: a fake payment service for your tests and your local runs: it initiates transactions,
 * answers status queries and sends notifications to your IPN address, as the real one does.
 * @packageDocumentation
 */
export { createFakeProvider } from './testing/fake-provider.js';
export type { FakeProvider } from './testing/fake-provider.js';
export type { FakeProviderOptions } from './testing/fake-provider-options.js';
export { runStoreConformance } from './testing/store-conformance.js';
export type {
  ConformanceFailure,
  LateWriteProbe,
  StoreConformanceOptions,
  StoreConformanceResult,
} from './testing/store-conformance.js';
export type {
  Lease,
  ListOptions,
  Settlement,
  StatusCounts,
  AuditLog,
  PauseSwitch,
  AuditEntry,
  AuditListOptions,
} from './stores/store.js';
export type { Expectation } from './stores/expectation-store.js';
