/**
 * `ipn-kit/orm`: exactly once with the ORM you already use. Each function takes your ORM's client and
 * returns the {@link Transactions} a store runs each delivery attempt in (`new PostgresStore({ pool,
 * transactions })`); listeners then write through the ORM's own transaction object, their context's `tx`.
 * No ORM is loaded by this entry point: each is an optional peer, used only through the client you pass.
 * @packageDocumentation
 */
export type { Transactions, Statement, StatementResult } from './stores/transactions.js';
export { prismaTransactions } from './stores/orm/prisma.js';
export { drizzleTransactions } from './stores/orm/drizzle.js';
export { kyselyTransactions } from './stores/orm/kysely.js';
export { knexTransactions } from './stores/orm/knex.js';
export { typeormTransactions } from './stores/orm/typeorm.js';
export { sequelizeTransactions } from './stores/orm/sequelize.js';
