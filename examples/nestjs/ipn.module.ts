import {
  Inject,
  Module,
  RequestMethod,
  type DynamicModule,
  type MiddlewareConsumer,
  type NestModule,
} from '@nestjs/common';
import type { IpnRouter } from 'ipn-kit';

const IPN_OPTIONS = Symbol('IPN_OPTIONS');

interface IpnModuleOptions {
  router: IpnRouter;
  path: string;
}

/** Mounts the IPN router at `path` (default `ipn`) as the Express middleware it is. */
@Module({})
export class IpnModule implements NestModule {
  static forRoot(router: IpnRouter, path = 'ipn'): DynamicModule {
    return { module: IpnModule, providers: [{ provide: IPN_OPTIONS, useValue: { router, path } }] };
  }

  constructor(@Inject(IPN_OPTIONS) private readonly options: IpnModuleOptions) {}

  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(this.options.router).forRoutes({ path: this.options.path, method: RequestMethod.ALL });
  }
}
