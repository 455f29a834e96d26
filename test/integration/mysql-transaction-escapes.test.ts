/**
 * Hostile review of MysqlStore's delivery transaction (MariaDB): MySQL ends a transaction in ways that are
 * no COMMIT statement to PostgreSQL's reading of a text, which `asSavepoint` (written for PostgreSQL) is:
 * a version comment `/*! ... *\/` whose content MySQL runs, a `#` comment before a COMMIT, and the
 * statements that commit implicitly (DDL such as CREATE TABLE or TRUNCATE, LOCK TABLES). Each commits the
 * attempt's earlier writes early: a failed attempt's credit stays, and its retry credits again (two rows).
 * The MySQL path now reads texts as MySQL does (executable comments unwrapped, comments stripped) and
 * refuses the statements that commit implicitly. (SET autocommit = 1 held: after START TRANSACTION it
 * commits nothing.)
 */
import { createPool, type Pool, type RowDataPacket } from 'mysql2/promise';
import { ipnRouter } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { describeWithService, eventually, mysqlUrl } from '../helpers/services.js';

jest.setTimeout(30_000);

describeWithService(
  'MariaDB',
  'MySQL transaction escapes: nothing a listener sends ends the delivery early',
  () => {
    const suffix = `${process.pid}_${Date.now() % 100_000}`;
    const table = `ipn_myx_${suffix}`;
    const ledger = `ledger_myx_${suffix}`;
    let pool: Pool;
    beforeAll(async () => {
      pool = createPool({ uri: mysqlUrl(), connectionLimit: 6 });
      await new MysqlStore({ pool, table }).migrate();
      await pool.query(`CREATE TABLE ${ledger} (transaction_id VARCHAR(255) NOT NULL, note VARCHAR(64))`);
    });
    afterAll(async () => {
      await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_expected, ${ledger}, ${ledger}_scratch`);
      await pool.end();
    });
    const serve = servedRouters();
    const statusOf = async (key: string) => {
      const [rows] = await pool.query<RowDataPacket[]>(`SELECT status FROM ${table} WHERE \`key\` = ?`, [
        key,
      ]);
      return rows[0]?.status as string | undefined;
    };
    const notesOf = async (id: unknown) => {
      const [rows] = await pool.query<RowDataPacket[]>(
        `SELECT note FROM ${ledger} WHERE transaction_id = ? ORDER BY note`,
        [id],
      );
      return rows.map((row) => row.note as string);
    };

    test.each([
      ['a version comment holding COMMIT', '/*!50000 COMMIT */'],
      ['a # comment before COMMIT', '# flush\nCOMMIT'],
      ['DDL, which commits implicitly', `CREATE TABLE IF NOT EXISTS ${ledger}_scratch (n INT)`],
    ])('%s: the failed attempt writes nothing; its retry, one row', async (_, text) => {
      const ipn = ipnRouter({
        store: new MysqlStore({ pool, table }),
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
      });
      ipn.on('successful', async (n, { db, attempt }) => {
        await db.query(`INSERT INTO ${ledger} (transaction_id, note) VALUES (?, ?)`, [
          n.transaction_id,
          `a${attempt}`,
        ]);
        if (attempt > 1) return;
        await db.query(text).catch(() => {});
        throw new Error('the order service is down');
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
      await eventually(`${key} delivered`, async () => (await statusOf(key)) === 'delivered');
      expect(await notesOf(payload.transaction_id)).toEqual(['a2']);
    });
  },
);
