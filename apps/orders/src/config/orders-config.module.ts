import { type DynamicModule, Module } from '@nestjs/common';
import { ORDERS_CONFIG, type OrdersConfig } from './orders.config.js';

/** Makes the validated {@link OrdersConfig} injectable everywhere as `ORDERS_CONFIG`. */
@Module({})
export class OrdersConfigModule {
  static forRoot(config: OrdersConfig): DynamicModule {
    return {
      module: OrdersConfigModule,
      global: true,
      providers: [{ provide: ORDERS_CONFIG, useValue: config }],
      exports: [ORDERS_CONFIG],
    };
  }
}
