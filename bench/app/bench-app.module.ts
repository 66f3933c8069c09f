import { type DynamicModule, Module, type Type } from '@nestjs/common';
import { IdempotencyModule } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import {
  IdempotencyRecordEntity,
  MysqlIdempotencyRecordEntity,
  TypeOrmIdempotencyStore,
} from 'nestjs-idempotency/typeorm';
import { NodeIdempotencyModule } from '@node-idempotency/nestjs';
import { StorageAdapterEnum } from '@node-idempotency/shared';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import type { DataSource, DataSourceOptions } from 'typeorm';
import { APP_INTERCEPTOR } from '@nestjs/core';
import {
  DurableOrdersController,
  FloorOrdersController,
  PeerOrdersController,
  PlainOrdersController,
  PlainTransactionOrdersController,
  RedisOrdersController,
} from './bench-orders.controllers.js';
import { FloorIdempotencyInterceptor } from './floor-idempotency.interceptor.js';
import { BenchOrdersService } from './bench-orders.service.js';
import type { BenchServerConfig } from './bench-server.js';

const CONTROLLERS: Record<BenchServerConfig['kind'], Type> = {
  plain: PlainOrdersController,
  'plain-tx': PlainTransactionOrdersController,
  floor: FloorOrdersController,
  redis: RedisOrdersController,
  durable: DurableOrdersController,
  'durable-mariadb': DurableOrdersController,
  peer: PeerOrdersController,
};

/** Keys are per tenant and operation, as in the sample service. */
const tenantOf = (request: { headers: Record<string, string | string[] | undefined> }) => {
  const value = request.headers['x-tenant-id'];
  return typeof value === 'string' ? value : undefined;
};

/** The idempotency layer of one server kind (nothing for `plain`). */
function idempotencyLayer(config: BenchServerConfig): DynamicModule[] {
  switch (config.kind) {
    case 'plain':
    case 'plain-tx':
    case 'floor':
      return [];
    case 'peer':
      return [
        NodeIdempotencyModule.forRootAsync({
          storage: { adapter: StorageAdapterEnum.redis, options: { url: config.redisUrl } },
          cacheKeyPrefix: config.redisPrefix,
        }),
      ];
    case 'redis':
    case 'durable':
    case 'durable-mariadb':
      return [
        IdempotencyModule.forRootAsync({
          inject: [getDataSourceToken()],
          useFactory: (dataSource: DataSource) => ({
            // From the URL: the store owns its client, with its defaults (fail fast, auto-pipelining).
            store: new RedisIdempotencyStore(config.redisUrl, { prefix: config.redisPrefix }),
            durableStore: config.kind === 'redis' ? undefined : new TypeOrmIdempotencyStore(dataSource),
            tenant: tenantOf,
            scope: ['tenant', 'operation'],
          }),
        }),
      ];
  }
}

/** PostgreSQL (a pool of 10), or MariaDB for `durable-mariadb` (the same pool size). */
function dataSourceOptions(config: BenchServerConfig): DataSourceOptions {
  if (config.kind === 'durable-mariadb') {
    return {
      type: 'mariadb',
      url: config.databaseUrl,
      entities: [MysqlIdempotencyRecordEntity],
      synchronize: false,
      connectTimeout: 5_000,
      extra: { connectionLimit: 10 },
    };
  }
  return {
    type: 'postgres',
    url: config.databaseUrl,
    schema: config.schema,
    entities: [IdempotencyRecordEntity],
    synchronize: false,
    extra: { max: 10, connectionTimeoutMillis: 5_000 },
  };
}

/** The benchmark service: one POST /orders route, validated, one INSERT, behind one idempotency layer. */
@Module({})
export class BenchAppModule {
  static forServer(config: BenchServerConfig): DynamicModule {
    return {
      module: BenchAppModule,
      imports: [TypeOrmModule.forRoot(dataSourceOptions(config)), ...idempotencyLayer(config)],
      controllers: [CONTROLLERS[config.kind]],
      providers: [
        BenchOrdersService,
        ...(config.kind === 'floor'
          ? [
              {
                provide: APP_INTERCEPTOR,
                useValue: new FloorIdempotencyInterceptor(config.redisUrl, config.redisPrefix),
              },
            ]
          : []),
      ],
    };
  }
}
