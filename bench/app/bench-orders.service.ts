import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import type { BenchOrderDto } from './bench-order.dto.js';

/** The order the handler answers: about 300 bytes of JSON. */
export interface BenchOrderView {
  id: string;
  customerId: string;
  status: 'confirmed';
  currency: string;
  items: { sku: string; quantity: number; unitPriceCents: number }[];
  totalCents: number;
  createdAt: string;
}

/** Created by the driver in the bench schema (see bench/driver/database.ts). */
export const BENCH_ORDERS_TABLE = 'bench_orders';

/**
 * The one piece of business logic of every scenario: one INSERT of one row, through the
 * transaction's manager when the route is transactional, through the pool otherwise.
 */
@Injectable()
export class BenchOrdersService {
  private readonly insertSql: string;

  constructor(@InjectDataSource() private readonly dataSource: DataSource) {
    const schema = (dataSource.options as { schema?: string }).schema;
    const table = schema ? `"${schema}".${BENCH_ORDERS_TABLE}` : BENCH_ORDERS_TABLE;
    // MariaDB (durable-mariadb): the database of the URL holds the table, and mysql2 binds `?`.
    const mysql = dataSource.options.type === 'mariadb';
    const values = mysql ? '?, ?, ?, ?, ?, ?, ?' : '$1, $2, $3, $4, $5, $6, $7';
    this.insertSql = `INSERT INTO ${mysql ? BENCH_ORDERS_TABLE : table} (id, tenant_id, customer_id, currency, items, total_cents, created_at) VALUES (${values})`;
  }

  async create(tenantId: string, dto: BenchOrderDto, manager?: EntityManager): Promise<BenchOrderView> {
    const order: BenchOrderView = {
      id: randomUUID(),
      customerId: dto.customerId,
      status: 'confirmed',
      currency: dto.currency,
      items: dto.items.map(({ sku, quantity, unitPriceCents }) => ({ sku, quantity, unitPriceCents })),
      totalCents: dto.items.reduce((sum, item) => sum + item.quantity * item.unitPriceCents, 0),
      createdAt: new Date().toISOString(),
    };
    await (manager ?? this.dataSource.manager).query(this.insertSql, [
      order.id,
      tenantId,
      order.customerId,
      order.currency,
      JSON.stringify(order.items),
      order.totalCents,
      order.createdAt,
    ]);
    return order;
  }
}
