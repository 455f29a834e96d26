import type { PauseSwitch } from './store.js';

/**
 * How a SQL store reads and writes the row `paused` of its control table (`<table>_control`, made by schema
 * version 3): `read` returns the rows of `SELECT value ... WHERE name = 'paused'`, `write` runs the dialect's
 * upsert of that row with the value `'true'` or `'false'`.
 */
export interface ControlRow {
  read(): Promise<Array<Record<string, unknown>>>;
  write(value: 'true' | 'false'): Promise<unknown>;
}

/**
 * Whether delivery is paused (`ipn.pause()`), kept in the control table beside the inbox: one row, shared
 * by every instance over the store and kept across restarts. No row: not paused.
 */
export function sqlPauseSwitch(row: ControlRow): PauseSwitch {
  return {
    read: async () => (await row.read()).some((found) => String(found.value) === 'true'),
    write: async (paused) => {
      await row.write(paused ? 'true' : 'false');
    },
  };
}
