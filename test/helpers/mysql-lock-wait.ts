import type { Pool, RowDataPacket } from 'mysql2/promise';
import { eventually } from './services.js';

/**
 * Waits until the session `threadId` waits for a row lock, as `SHOW ENGINE INNODB STATUS` says it, which
 * InnoDB writes anew on each call. Not `information_schema.innodb_trx`: InnoDB fills that from a cache it
 * refreshes only when nobody read it in the last 100 ms, so a poll every 10 ms (or two tests polling at
 * once) reads the answer of the first poll for ever, and a lock wait that began after it is never seen.
 */
export async function waitsForRowLock(pool: Pool, threadId: number, what: string): Promise<void> {
  await eventually(what, async () => {
    const [rows] = await pool.query<RowDataPacket[]>('SHOW ENGINE INNODB STATUS');
    return String(rows[0]?.Status)
      .split('---TRANSACTION ')
      .some((block) => new RegExp(`thread id ${threadId},`).test(block) && /^LOCK WAIT /m.test(block));
  });
}
