import { Column, Entity, Index, OneToMany, PrimaryColumn } from 'typeorm';
import { bigintAsNumber } from '../database/column-transformers.js';
import type { Currency } from './currency.js';
import { OrderItem } from './order-item.entity.js';

export type OrderStatus = 'pending' | 'paid';

/**
 * An order of one tenant. Column types are the ones PostgreSQL and SQLite share, so one
 * migration serves both; times are epoch milliseconds (`bigint`).
 */
@Entity({ name: 'orders' })
@Index('IDX_orders_tenant_created', ['tenantId', 'createdAtMs', 'id'])
export class Order {
  @PrimaryColumn({ type: 'varchar', length: 36 })
  id!: string;

  @Column({ name: 'tenant_id', type: 'varchar', length: 36 })
  tenantId!: string;

  @Column({ name: 'customer_id', type: 'varchar', length: 36 })
  customerId!: string;

  @Column({ type: 'varchar', length: 3 })
  currency!: Currency;

  @Column({ name: 'total_cents', type: 'bigint', transformer: bigintAsNumber })
  totalCents!: number;

  @Column({ type: 'varchar', length: 16 })
  status!: OrderStatus;

  @Column({ name: 'payment_id', type: 'varchar', length: 36, nullable: true })
  paymentId!: string | null;

  @Column({ name: 'created_at_ms', type: 'bigint', transformer: bigintAsNumber })
  createdAtMs!: number;

  @OneToMany(() => OrderItem, (item) => item.order, { cascade: false })
  items!: OrderItem[];
}
