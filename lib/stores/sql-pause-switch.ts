import type { PauseSwitch } from './store.js';

/**
 * How a SQL store reads and writes the row `paused` of its control table (`<table>_control`, made by schema
 * version 3): `read` runs `text` (`SELECT value ... WHERE name = 'paused'`) and resolves its rows, `write`
 * runs the dialect's upsert of that row with the value `'true'` or `'false'`.
 */
export interface ControlRow {
  read(text: string): Promise<unknown[]>;
  write(value: 'true' | 'false'): Promise<unknown>;
}

/**
 * Whether delivery is paused (`ipn.pause()`), kept in the control table `control` (quoted) beside the inbox: one row, shared
 * by every instance over the store and kept across restarts. No row: not paused.
 */
export function sqlPauseSwitch(control: string, row: ControlRow): PauseSwitch {
  const read = `SELECT value FROM ${control} WHERE name = 'paused'`;
  return {
    read: async () =>
      (await row.read(read)).some((found) => String(Reflect.get(Object(found), 'value')) === 'true'),
    write: async (paused) => {
      await row.write(paused ? 'true' : 'false');
    },
  };
}
