import { idempotencyTypeOrmEntities } from 'nestjs-idempotency/typeorm';
import type { DataSourceOptions, LoggerOptions } from 'typeorm';
import type { DatabaseConfig } from '../config/orders.config.js';
import { Order } from '../orders/order.entity.js';
import { OrderItem } from '../orders/order-item.entity.js';
import { Payment } from '../payments/payment.entity.js';
import { PaymentEvent } from '../webhooks/payment-event.entity.js';
import { OutboxEvent } from '../events/outbox-event.entity.js';
import { OrderNotification } from '../notifications/order-notification.entity.js';
import { ORDERS_MIGRATIONS, ORDERS_MIGRATIONS_PARTITIONED } from './migrations/index.js';
import { atomicFileSaver } from './sqljs-file.js';

/** Entities of the service (the idempotency record's entity is added per database type). */
export const ORDERS_ENTITIES = [Order, OrderItem, Payment, PaymentEvent, OutboxEvent, OrderNotification];

/** mysql2's pool size (TypeORM's `poolSize`, mysql2's `connectionLimit`; its default too). */
const MYSQL_POOL_SIZE = 10;

/** The TypeORM driver of each kind of database. */
const DATA_SOURCE_TYPE = { postgres: 'postgres', mysql: 'mysql', embedded: 'sqljs' } as const;

/**
 * TypeORM options for the configured database. Migrations are run by `migrateDatabase()`
 * (under an advisory lock), never by `migrationsRun` or `synchronize`.
 */
export function dataSourceOptionsFor(database: DatabaseConfig): DataSourceOptions {
  const common = {
    entities: [...ORDERS_ENTITIES, ...idempotencyTypeOrmEntities(DATA_SOURCE_TYPE[database.kind])],
    migrations:
      database.kind === 'postgres' && database.idempotencyPartitionMs !== undefined
        ? ORDERS_MIGRATIONS_PARTITIONED
        : ORDERS_MIGRATIONS,
    migrationsRun: false,
    synchronize: false,
    // Failed queries reach the exception filter, which logs them without their parameters.
    logging: ['warn'] as LoggerOptions,
  };
  if (database.kind === 'postgres') {
    return {
      ...common,
      type: 'postgres',
      url: database.url,
      schema: database.schema,
      applicationName: 'orders',
      // Unqualified names in raw SQL (and the migrations table) land in the same schema.
      extra: { options: `-c search_path=${database.schema}`, connectionTimeoutMillis: 5000 },
    };
  }
  if (database.kind === 'mysql') {
    // mysql2 serves MySQL and MariaDB alike; TypeORM's 'mariadb' only tunes a few MariaDB features.
    return {
      ...common,
      type: DATA_SOURCE_TYPE.mysql,
      url: database.url,
      connectTimeout: 5000,
      poolSize: MYSQL_POOL_SIZE,
      // mysql2 checks no pooled connection before lending it: close idle ones before the server's
      // wait_timeout or a proxy's idle cutoff does (maxIdle below the pool size turns the idle
      // timer on), and keep TCP keep-alive on so a dead peer is noticed. docs/durable-tier.md.
      extra: {
        maxIdle: MYSQL_POOL_SIZE - 1,
        idleTimeout: 60_000,
        enableKeepAlive: true,
        keepAliveInitialDelay: 10_000,
      },
    };
  }
  return {
    ...common,
    type: 'sqljs',
    location: database.file,
    autoSave: true,
    autoSaveCallback: atomicFileSaver(database.file),
  };
}
