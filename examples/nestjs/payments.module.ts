import {
  Inject,
  Injectable,
  Module,
  RequestMethod,
  type DynamicModule,
  type MiddlewareConsumer,
  type NestModule,
  type OnModuleDestroy,
  type OnModuleInit,
} from '@nestjs/common';
import type { Pool } from 'pg';
import { ipnRouter, type IpnNotification } from 'ipn-kit';
import { prismaTransactions } from 'ipn-kit/orm';
import { PostgresStore } from 'ipn-kit/postgres';
import type { Prisma } from '../prisma/generated/client.js';
import { PG_POOL, PrismaService } from './prisma.service';

/** Your ledger, written through whatever Prisma client it is given: inside a delivery, its transaction. */
@Injectable()
export class LedgerService {
  /** Credits the order this transaction was initiated for, for its amount, once; otherwise throws. */
  async credit(tx: Prisma.TransactionClient, n: IpnNotification): Promise<void> {
    const orderId = String(n.custom_data);
    const { amount } = n;
    if (amount === null) throw new Error(`${n.transaction_id} carries no amount`);
    const paid = await tx.order.updateMany({
      where: { id: orderId, transactionId: n.transaction_id, amount, paidAt: null },
      data: { paidAt: new Date() },
    });
    // Not this order's transaction or amount, or paid already: nothing credited; dead after its retries.
    if (paid.count !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await tx.ledger.create({ data: { transactionId: n.transaction_id, orderId, amount } });
  }
}

/**
 * The IPN router, at least once on PostgreSQL, each delivery attempt in Prisma's interactive transaction:
 * the ledger's credit commits together with the inbox's `delivered` mark, or not at all.
 */
function createIpn(pool: Pool, prisma: PrismaService, ledger: LedgerService) {
  const store = new PostgresStore({ pool, transactions: prismaTransactions(prisma) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    await ledger.credit(tx, n);
  });
  return { ipn, store };
}

const IPN = Symbol('IPN');

/** The payments side of the app: Prisma, the ledger, and the IPN router mounted at /ipn. */
@Module({})
export class PaymentsModule implements NestModule, OnModuleInit, OnModuleDestroy {
  /** On `pool`, the app's one pg pool: yours to end after `app.close()`. */
  static forRoot(pool: Pool): DynamicModule {
    return {
      module: PaymentsModule,
      providers: [
        { provide: PG_POOL, useValue: pool },
        PrismaService,
        LedgerService,
        { provide: IPN, inject: [PG_POOL, PrismaService, LedgerService], useFactory: createIpn },
      ],
    };
  }

  constructor(@Inject(IPN) private readonly payments: ReturnType<typeof createIpn>) {}

  /** Creates the inbox at start when missing; with Prisma migrations of your own, drop this (docs/orm.md). */
  async onModuleInit(): Promise<void> {
    await this.payments.store.migrate();
  }

  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(this.payments.ipn).forRoutes({ path: 'ipn', method: RequestMethod.ALL });
  }

  /** Lets deliveries under way finish before Prisma disconnects (at application shutdown). */
  async onModuleDestroy(): Promise<void> {
    await this.payments.ipn.close();
  }
}
