/**
 * Type tests, checked by `npm run typecheck` (tsc --noEmit), never run: the `tx` of Knex, TypeORM and
 * Sequelize is the ORM's own transaction type, read from the client the user passes.
 */
import knex, { type Knex } from 'knex';
import { DataSource, type EntityManager } from 'typeorm';
import { Sequelize, type Transaction } from 'sequelize';
import { knexTransactions, sequelizeTransactions, typeormTransactions } from '../../lib/orm.js';
import type { Transactions } from '../../lib/orm.js';

/** `true` only when A and B are the same type. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type TxOf<T> = T extends Transactions<infer Tx> ? Tx : never;

const ofKnex = knexTransactions(knex({ client: 'pg' }));
const ofTypeorm = typeormTransactions(new DataSource({ type: 'postgres' }));
const ofSequelize = sequelizeTransactions(new Sequelize('postgres://localhost/test'));

export const knexTx: Same<TxOf<typeof ofKnex>, Knex.Transaction> = true;
export const typeormTx: Same<TxOf<typeof ofTypeorm>, EntityManager> = true;
export const sequelizeTx: Same<TxOf<typeof ofSequelize>, Transaction> = true;

// A listener writes through the ORM's own API, typed.
void ofKnex.transaction(async (tx) => tx('ledger').insert({ transaction_id: 't' }));
void ofTypeorm.transaction(async (tx) => tx.query('SELECT 1'));
void ofSequelize.transaction((tx) => Promise.resolve(tx.afterCommit(() => {})));

// @ts-expect-error a DataSource is not a Knex instance
knexTransactions(new DataSource({ type: 'postgres' }));
// @ts-expect-error a Sequelize instance is not a DataSource
typeormTransactions(new Sequelize('postgres://localhost/test'));
// @ts-expect-error a DataSource is not a Sequelize instance
sequelizeTransactions(new DataSource({ type: 'postgres' }));
