import { ipnRouter, MemoryStore } from 'ipn-kit';

// #region thresholds
export const ipn = ipnRouter({
  store: new MemoryStore(),
  delivery: 'at-least-once',
  alerts: { failuresInARow: 5, backlogAgeMs: 120_000 }, // every other threshold keeps its default
});
// #endregion thresholds
