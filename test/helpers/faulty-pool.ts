import type { Pool } from 'pg';
import type { PgQueryResult, PgQueryable } from '../../lib/stores/postgres/postgres-store.js';

/** How the chosen write fails: `refused` (it never runs), `lost` (it runs, its answer is lost), `crash`. */
export type Fault = 'refused' | 'lost' | 'crash';

/** A write statement: anything but a plain read. */
const WRITE = /^\s*(INSERT|UPDATE|DELETE|WITH)\b/i;

/**
 * A `pg` pool wrapper that fails the `at`-th write statement (1-based) the store runs, once: refused (the
 * statement never runs), lost (it runs and commits, then the caller gets an error, as when a connection
 * drops after the commit), or a crash (`onCrash` runs right after it committed, e.g. the process kills
 * itself). A lease that takes nothing (a recovery round with nothing due) is not counted, so that the count
 * follows the notifications and not the timers; a refused lease runs in a transaction rolled back.
 */
export class FaultyPool implements PgQueryable {
  /** The writes counted so far, by the first words of their statement. */
  readonly writes: string[] = [];
  /** Whether the fault has happened. */
  fired = false;

  constructor(
    private readonly pool: Pool,
    private readonly fault: Fault,
    private readonly at: number,
    private readonly onCrash: () => void = () => {},
  ) {}

  async query(text: string, values?: unknown[]): Promise<PgQueryResult> {
    if (!WRITE.test(text)) return this.pool.query(text, values);
    const lease = /FOR UPDATE SKIP LOCKED/.test(text);
    const chosen = () => !this.fired && this.writes.length + 1 === this.at;
    if (lease) return this.#lease(text, values, chosen);
    const label = text.trim().split(/\s+/).slice(0, 3).join(' ');
    if (chosen() && this.fault === 'refused') {
      this.writes.push(label);
      this.fired = true;
      throw new Error(`${label} refused (injected fault)`);
    }
    const result = await this.pool.query(text, values);
    this.writes.push(label);
    if (this.writes.length === this.at && !this.fired) return this.#fire(label, result);
    return result;
  }

  async #lease(text: string, values: unknown[] | undefined, chosen: () => boolean): Promise<PgQueryResult> {
    if (!chosen() || this.fault !== 'refused') {
      const result = await this.pool.query(text, values);
      if (result.rows.length === 0) return result;
      const fire = chosen();
      this.writes.push('lease');
      return fire ? this.#fire('lease', result) : result;
    }
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const result = await client.query(text, values);
      if (result.rows.length === 0) {
        await client.query('COMMIT');
        return result;
      }
      await client.query('ROLLBACK');
      this.writes.push('lease');
      this.fired = true;
      throw new Error('lease refused (injected fault)');
    } finally {
      client.release();
    }
  }

  #fire(label: string, result: PgQueryResult): PgQueryResult {
    this.fired = true;
    if (this.fault === 'crash') this.onCrash();
    if (this.fault === 'lost' || this.fault === 'crash') {
      throw new Error(`${label}: connection lost after the commit (injected fault)`);
    }
    return result;
  }
}
