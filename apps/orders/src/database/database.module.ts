import { ClsPluginTransactional } from '@nestjs-cls/transactional';
import { Global, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { ClsModule } from 'nestjs-cls';
import { DataSource } from 'typeorm';
import { ConfigService } from '@nestjs/config';
import type { OrdersConfig } from '../config/orders.config.js';
import { Clock } from '../common/clock.js';
import { dataSourceOptionsFor } from './data-source-options.js';
import { migrateDatabase } from './migrate.js';
import { TransactionRunner } from './transaction-runner.js';
import { transactionalAdapter } from './transactions.js';

/**
 * The database: TypeORM on PostgreSQL, MySQL / MariaDB or embedded sql.js, migrated before the first request.
 * `DataSource` (from TypeOrmModule), `TransactionHost` (from `@nestjs-cls/transactional`),
 * {@link TransactionRunner} and {@link Clock} are global.
 */
@Global()
@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      inject: [ConfigService],
      useFactory: (config: ConfigService<OrdersConfig, true>) => {
        const database = config.get('database', { infer: true });
        return {
          ...dataSourceOptionsFor(database),
          // The database server may still be starting (docker compose up): retry for about 10 s.
          retryAttempts: database.kind === 'embedded' ? 0 : 5,
          retryDelay: 2000,
        };
      },
      dataSourceFactory: async (options) => {
        const dataSource = await new DataSource(options!).initialize();
        try {
          await migrateDatabase(dataSource);
        } catch (error) {
          await dataSource.destroy();
          throw error;
        }
        return dataSource;
      },
    }),
    // Transactions propagate through nestjs-cls: services write through `TransactionHost.tx`, and
    // inside a transactional route that is the route's own transaction (see transactions.ts).
    ClsModule.forRoot({ global: true, plugins: [new ClsPluginTransactional({ adapter: transactionalAdapter() })] }),
  ],
  providers: [TransactionRunner, Clock],
  exports: [TransactionRunner, Clock],
})
export class DatabaseModule {}
