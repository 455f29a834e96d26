import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Pool } from 'pg';
import { PaymentsModule } from './payments.module';

/**
 * The NestJS app on Prisma: the IPN router at /ipn, at least once on PostgreSQL, crediting the ledger
 * through Prisma's transaction client (payments.module.ts). test/integration/nestjs.test.ts runs it.
 */
export async function createPrismaNestApp(pool: Pool) {
  @Module({ imports: [PaymentsModule.forRoot(pool)] })
  class AppModule {}
  // Nest's global body parser would read (and refuse) the notification before the IPN route: turn it off.
  return NestFactory.create(AppModule, { bodyParser: false });
}
