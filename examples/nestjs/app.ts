import 'reflect-metadata';
import { Body, Controller, Module, Post, type MiddlewareConsumer, type NestModule } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { json } from 'express';
import type { IpnRouter } from 'ipn-kit';
import { IpnModule } from './ipn.module';

/** The rest of the app: a controller that takes JSON. */
@Controller('orders')
class OrdersController {
  @Post()
  create(@Body() order: unknown) {
    return { received: order };
  }
}

// #region nestjs
export async function createNestApp(ipn: IpnRouter) {
  @Module({ imports: [IpnModule.forRoot(ipn, 'ipn')], controllers: [OrdersController] })
  class AppModule implements NestModule {
    configure(consumer: MiddlewareConsumer) {
      consumer.apply(json()).forRoutes(OrdersController); // JSON for your controllers only
    }
  }
  // Nest's global body parser would read (and refuse) the notification before the IPN route: turn it off.
  return NestFactory.create(AppModule, { bodyParser: false });
}
// #endregion nestjs
