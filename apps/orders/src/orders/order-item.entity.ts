import { Column, Entity, JoinColumn, ManyToOne, PrimaryColumn } from 'typeorm';
import type { Order } from './order.entity.js';

/** One line of an order; `position` keeps the order in which the client listed them. */
@Entity({ name: 'order_items' })
export class OrderItem {
  @PrimaryColumn({ name: 'order_id', type: 'varchar', length: 36 })
  orderId!: string;

  @PrimaryColumn({ type: 'integer' })
  position!: number;

  @Column({ type: 'varchar', length: 64 })
  sku!: string;

  @Column({ type: 'integer' })
  quantity!: number;

  @Column({ name: 'unit_price_cents', type: 'integer' })
  unitPriceCents!: number;

  @ManyToOne('Order', (order: Order) => order.items, { onDelete: 'CASCADE' })
  // Named as in the migration, so the schema diff stays empty.
  @JoinColumn({ name: 'order_id', foreignKeyConstraintName: 'FK_order_items_order' })
  order?: Order;
}
