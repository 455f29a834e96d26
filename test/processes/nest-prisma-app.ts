// The NestJS example on Prisma (examples/nestjs/prisma-app.ts) in a process of its own, as NestJS 12 is
// ESM-only and jest loads CommonJS: on the database at DATABASE_URL, listening on PORT. Prints a line of
// JSON once it listens, for test/integration/nestjs.test.ts.
import { Pool } from 'pg';
import { createPrismaNestApp } from '../../examples/nestjs/prisma-app';

async function main(): Promise<void> {
  const pool = new Pool({ connectionString: process.env.DATABASE_URL });
  pool.on('error', () => {});
  const app = await createPrismaNestApp(pool);
  app.useLogger(false);
  await app.listen(Number(process.env.PORT), '127.0.0.1');
  console.log(JSON.stringify({ event: 'listening' }));
}

void main();
