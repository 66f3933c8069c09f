import { Column, Entity, Index, PrimaryColumn } from 'typeorm';
import { bigintAsNumber } from '../database/column-transformers.js';

/**
 * A payment provider event that was applied (`POST /webhooks/payments`). The primary key is
 * the provider's event id: even without the idempotency layer, one event id is one row.
 */
@Entity({ name: 'payment_events' })
@Index('IDX_payment_events_payment', ['tenantId', 'paymentId', 'receivedAtMs'])
export class PaymentEvent {
  @PrimaryColumn({ type: 'varchar', length: 255 })
  id!: string;

  /** The tenant of the payment the event names (a provider sends no tenant). */
  @Column({ name: 'tenant_id', type: 'varchar', length: 36 })
  tenantId!: string;

  @Column({ name: 'payment_id', type: 'varchar', length: 36 })
  paymentId!: string;

  @Column({ type: 'varchar', length: 64 })
  type!: string;

  @Column({ name: 'received_at_ms', type: 'bigint', transformer: bigintAsNumber })
  receivedAtMs!: number;
}
