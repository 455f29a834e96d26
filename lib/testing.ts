export { createFakeProvider } from './testing/fake-provider.js';
export type { FakeProvider, FakeProviderStats, InitiatedTransaction } from './testing/fake-provider.js';
export type { FakeProviderOptions, FakeProviderInit } from './testing/fake-provider-options.js';
export type { InitiateOptions, ForgeOptions } from './testing/fake-provider-initiate.js';
export type { DeliveryReport } from './testing/fake-provider-delivery.js';
export type { FakeTransaction } from './testing/fake-provider-record.js';
