export { createFakeProvider } from './fake-provider.js';
export type { FakeProvider, FakeProviderStats, InitiatedTransaction } from './fake-provider.js';
export type { FakeProviderOptions } from './fake-provider-options.js';
export type { InitiateOptions, ForgeOptions } from './fake-provider-initiate.js';
export type { DeliveryReport } from './fake-provider-delivery.js';
export type { FakeTransaction } from './fake-provider-record.js';
