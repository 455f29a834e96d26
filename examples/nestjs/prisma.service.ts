import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import type { Pool } from 'pg';
import { PrismaClient } from '../prisma/generated/client.js';

/** The app's one pg pool, given by whoever starts the app (and ends it after `app.close()`). */
export const PG_POOL = Symbol('PG_POOL');

/**
 * Prisma for the whole app, on the app's pool: the same pool ipn-kit's store runs on, so that one pool
 * serves both. Prisma's pg adapter leaves a pool it was given open when it disconnects.
 */
@Injectable()
export class PrismaService extends PrismaClient implements OnApplicationShutdown {
  constructor(@Inject(PG_POOL) pool: Pool) {
    super({ adapter: new PrismaPg(pool) });
  }

  // At application shutdown, after every module's onModuleDestroy: the IPN router has closed by then.
  async onApplicationShutdown(): Promise<void> {
    await this.$disconnect();
  }
}
