import { Global, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { ConfigService } from '@nestjs/config';
import type { OrdersConfig } from '../config/orders.config.js';
import { Clock } from '../common/clock.js';
import { dataSourceOptionsFor } from './data-source-options.js';
import { migrateDatabase } from './migrate.js';
import { TransactionRunner } from './transaction-runner.js';

/**
 * The database: TypeORM on PostgreSQL or embedded sql.js, migrated before the first request.
 * `DataSource` (from TypeOrmModule), {@link TransactionRunner} and {@link Clock} are global.
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
          // PostgreSQL may still be starting (docker compose up): retry for about 10 s.
          retryAttempts: database.kind === 'postgres' ? 5 : 0,
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
  ],
  providers: [TransactionRunner, Clock],
  exports: [TransactionRunner, Clock],
})
export class DatabaseModule {}
