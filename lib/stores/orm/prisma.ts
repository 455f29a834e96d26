import { messageOf } from '../../shared/errors.js';
import type { Statement, StatementResult, Transactions } from '../transactions.js';

/**
 * Options of the interactive transaction each delivery attempt runs in: Prisma's own
 * (`prisma.$transaction(fn, options)`), with defaults that fit a delivery attempt.
 * @inline
 */
export interface PrismaTransactionOptions {
  /**
   * Milliseconds the transaction may stay open, from its start to its commit: the listeners' whole run.
   * Prisma's own default (5 s) would roll back a slow listener's writes; this one is the router's default
   * `leaseMs`, so that the lease (taken before the transaction opens) runs out first: a listener that long
   * has lost its attempt anyway. Raise it with `leaseMs`. @default 60_000
   */
  timeout?: number;
  /**
   * Milliseconds to wait for a connection of the pool to open the transaction. Prisma's default is 2 s; an
   * attempt that cannot open its transaction fails and is retried later, so a busy pool is waited for a
   * while first. @default 10_000
   */
  maxWait?: number;
  /** The transaction's isolation level. @default the database's (PostgreSQL: `'ReadCommitted'`) */
  isolationLevel?: 'ReadUncommitted' | 'ReadCommitted' | 'RepeatableRead' | 'Serializable';
}

/** What ipn-kit uses of a Prisma client, and of the transaction client its `$transaction` hands out. */
interface RawSql {
  /** Runs `query` with `$1` parameters; resolves its rows. */
  $queryRawUnsafe(query: string, ...values: unknown[]): PromiseLike<unknown>;
  /** Runs `query` with `$1` parameters; resolves how many rows it changed. */
  $executeRawUnsafe(query: string, ...values: unknown[]): PromiseLike<number>;
}

/**
 * A `PrismaClient` (as generated from your schema, or extended with `$extends`), as ipn-kit sees it. Its
 * `$transaction` is overloaded (an array of queries, or a callback): the callback form is the one used.
 * @inline
 */
export interface PrismaClientLike extends RawSql {
  /** Runs `fn` in an interactive transaction: commits when it resolves, rolls back when it rejects. */
  $transaction(
    fn: (tx: unknown) => Promise<unknown>,
    options?: PrismaTransactionOptions,
  ): PromiseLike<unknown>;
}

/**
 * The transaction client Prisma hands to the callback of `client.$transaction`: your models (`tx.ledger`)
 * and raw SQL, bound to the transaction. Inferred from the callback form of `$transaction`, the last of its
 * overloads, which is the one TypeScript infers from.
 */
export type PrismaTxOf<Client> = Client extends {
  $transaction(fn: (tx: infer Tx) => unknown, ...options: never[]): unknown;
}
  ? Tx
  : never;

const DEFAULTS = { timeout: 60_000, maxWait: 10_000 };

const ISOLATION_LEVELS = ['ReadUncommitted', 'ReadCommitted', 'RepeatableRead', 'Serializable'];

/**
 * The {@link Transactions} of a Prisma client: each delivery attempt runs in an interactive transaction
 * (`prisma.$transaction(async (tx) => ...)`), and listeners get its transaction client as `tx`, typed with
 * your models. What they write through `tx` commits together with ipn-kit's `delivered` mark, or not at all.
 * A `tx.$transaction(...)` inside a listener is a savepoint, as Prisma makes it.
 *
 * With Prisma 7's pg adapter, give the store and Prisma the same pool (`new PrismaPg(pool)`): one pool for
 * both. The store also runs through Prisma alone (`new PostgresStore({ transactions })`, no pool): its own
 * statements then go through `prisma.$queryRawUnsafe`, with `$1` parameters.
 *
 * Prisma's pg adapter reads `timestamptz` values as if the session's `TimeZone` were UTC (prisma/orm#26786),
 * your models' and the inbox's alike (when the store runs through Prisma alone): when the database's default
 * zone is another, run the pool in UTC (`options: '-c TimeZone=UTC'`). ipn-kit compares times in SQL, and
 * sends the dates it writes as ISO text, which PostgreSQL reads exactly in any zone.
 *
 * @param prisma your `PrismaClient` instance (`new PrismaClient({ adapter })`), or one extended with `$extends`.
 * @param options the interactive transaction's `timeout`, `maxWait` and `isolationLevel`.
 * @throws TypeError when `prisma` is not a PrismaClient instance, or an option is out of range.
 * @example
 * import { Pool } from 'pg';
 * import { PrismaPg } from '@prisma/adapter-pg';
 * import { PrismaClient } from './generated/prisma/client.js';
 * import { ipnRouter } from 'ipn-kit';
 * import { PostgresStore } from 'ipn-kit/postgres';
 * import { prismaTransactions } from 'ipn-kit/orm';
 *
 * const pool = new Pool({ connectionString: process.env.DATABASE_URL });
 * const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
 * const store = new PostgresStore({ pool, transactions: prismaTransactions(prisma) });
 * const ipn = ipnRouter({ store, delivery: 'at-least-once' });
 * ipn.on('successful', async (n, { tx }) => {
 *   await tx.ledger.create({
 *     data: { transactionId: n.transaction_id, orderId: String(n.custom_data), amount: n.amount ?? 0 },
 *   });
 * });
 */
export function prismaTransactions<Client extends PrismaClientLike>(
  prisma: Client,
  options: PrismaTransactionOptions = {},
): Transactions<PrismaTxOf<Client>> {
  checkClient(prisma);
  const settings = checkOptions(options);
  return {
    name: 'Prisma',
    transaction<T>(work: (tx: PrismaTxOf<Client>) => Promise<T>): Promise<T> {
      const callback = (tx: unknown): Promise<T> => work(tx as PrismaTxOf<Client>);
      return Promise.resolve(prisma.$transaction(callback, settings) as PromiseLike<T>);
    },
    query: (tx, statement) => runStatement(tx as RawSql, statement),
    execute: (statement) => runStatement(prisma, statement),
  };
}

/** Runs `statement` through raw SQL: `$queryRawUnsafe` for its rows, `$executeRawUnsafe` for its count. */
async function runStatement(client: RawSql, statement: Statement): Promise<StatementResult> {
  const values = statement.values.map(toParameter);
  try {
    if (statement.returns === 'count') {
      return { rows: [], count: await client.$executeRawUnsafe(statement.text, ...values) };
    }
    const rows = (await client.$queryRawUnsafe(statement.text, ...values)) as Array<Record<string, unknown>>;
    return { rows: rows.map(toPgRow), count: rows.length };
  } catch (error) {
    throw asPgError(error);
  }
}

/**
 * Prisma's error for a failed raw query (code `P2010`) as pg throws it: PostgreSQL's own SQLSTATE as `code`
 * and its message, so that the store recognises an inbox not migrated (`42P01`) or a transaction a listener
 * left aborted (`25P02`) and says what to do; Prisma's error is its `cause`. Any other error as it is.
 */
function asPgError(error: unknown): unknown {
  const failure = dig(error, 'meta', 'driverAdapterError', 'cause');
  const code = dig(failure, 'originalCode');
  if (typeof code !== 'string') return error;
  const message = dig(failure, 'originalMessage');
  const pgError = new Error(typeof message === 'string' ? message : messageOf(error), { cause: error });
  return Object.assign(pgError, { code });
}

/** `value[a][b]...`, or `undefined` where a step is not an object. */
function dig(value: unknown, ...path: string[]): unknown {
  let current = value;
  for (const key of path) {
    if (typeof current !== 'object' || current === null) return undefined;
    current = Reflect.get(current, key);
  }
  return current;
}

/**
 * A Date as ISO text: Prisma's pg adapter sends a Date without its offset, which PostgreSQL reads in the
 * session's time zone (prisma/orm#28629); `2026-01-01T00:00:00.000Z` it reads exactly, in any zone.
 */
function toParameter(value: unknown): unknown {
  return value instanceof Date ? value.toISOString() : value;
}

/**
 * A row as `pg` gives it, so that a store reads the same values through any ORM: Prisma returns `bigint`
 * columns (a `count(*)`) as BigInt and `numeric` as its Decimal, where pg gives their exact text.
 */
function toPgRow(row: Record<string, unknown>): Record<string, unknown> {
  const converted: Record<string, unknown> = {};
  for (const [column, value] of Object.entries(row)) converted[column] = toPgValue(value);
  return converted;
}

function toPgValue(value: unknown): unknown {
  if (typeof value === 'bigint') return String(value);
  // Prisma's Decimal is decimal.js's, which tags itself; toFixed() writes every digit, never an exponent.
  if (Object.prototype.toString.call(value) === '[object Decimal]') {
    return (value as { toFixed(): string }).toFixed();
  }
  return value;
}

function checkClient(prisma: unknown): asserts prisma is PrismaClientLike {
  const methods = ['$transaction', '$queryRawUnsafe', '$executeRawUnsafe'];
  if (typeof prisma === 'object' && prisma !== null) {
    if (methods.every((method) => typeof Reflect.get(prisma, method) === 'function')) return;
  }
  const got =
    typeof prisma === 'function'
      ? 'a function: pass an instance, new PrismaClient({ adapter }), not the class'
      : typeof prisma === 'object' && prisma !== null
        ? `an object without ${methods.filter((method) => typeof Reflect.get(prisma, method) !== 'function').join(', ')}`
        : String(prisma);
  throw new TypeError(
    `prismaTransactions: expected a PrismaClient (new PrismaClient({ adapter })), got ${got}`,
  );
}

function checkOptions(options: unknown): PrismaTransactionOptions {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`prismaTransactions: options must be an object, got ${String(options)}`);
  }
  const { timeout, maxWait, isolationLevel } = options as PrismaTransactionOptions;
  const settings: PrismaTransactionOptions = {
    timeout: timeout ?? DEFAULTS.timeout,
    maxWait: maxWait ?? DEFAULTS.maxWait,
  };
  for (const [name, value] of Object.entries(settings)) {
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
      throw new TypeError(
        `prismaTransactions: ${name} must be a positive number of milliseconds, got ${String(value)}`,
      );
    }
  }
  if (isolationLevel !== undefined) {
    if (!ISOLATION_LEVELS.includes(isolationLevel)) {
      throw new TypeError(
        `prismaTransactions: isolationLevel must be one of ${ISOLATION_LEVELS.join(', ')}, got ${String(isolationLevel)}`,
      );
    }
    settings.isolationLevel = isolationLevel;
  }
  return settings;
}
