import { Column, Entity, Index, PrimaryColumn } from 'typeorm';
import { bigintAsNumber } from '../database/column-transformers.js';

/**
 * A confirmation sent for an order (the sample's stand-in for an e-mail). It is sent once per
 * `order.created` event because the insert and the completed idempotency record of the event
 * commit in one transaction. There is deliberately no unique index on `event_id`: the tests
 * check that the idempotency layer alone keeps it to one row.
 */
@Entity({ name: 'order_notifications' })
@Index('IDX_order_notifications_order', ['tenantId', 'orderId', 'sentAtMs'])
export class OrderNotification {
  @PrimaryColumn({ type: 'varchar', length: 36 })
  id!: string;

  @Column({ name: 'tenant_id', type: 'varchar', length: 36 })
  tenantId!: string;

  @Column({ name: 'order_id', type: 'varchar', length: 36 })
  orderId!: string;

  /** The `order.created` event it answers. */
  @Column({ name: 'event_id', type: 'varchar', length: 36 })
  eventId!: string;

  @Column({ type: 'varchar', length: 32 })
  kind!: 'order-confirmation';

  @Column({ name: 'sent_at_ms', type: 'bigint', transformer: bigintAsNumber })
  sentAtMs!: number;
}
