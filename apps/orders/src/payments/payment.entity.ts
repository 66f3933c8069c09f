import { Column, Entity, Index, PrimaryColumn } from 'typeorm';
import { bigintAsNumber } from '../database/column-transformers.js';
import type { Currency } from '../orders/currency.js';
import type { PaymentStatus } from './payment-status.js';

/**
 * A charge at the (simulated) card provider. Like a real provider, it keeps a unique index on
 * the idempotency key the caller sends (`provider_key`): one key, one charge, ever.
 */
@Entity({ name: 'payments' })
@Index('UQ_payments_provider_key', ['providerKey'], { unique: true })
@Index('IDX_payments_tenant_created', ['tenantId', 'createdAtMs', 'id'])
export class Payment {
  @PrimaryColumn({ type: 'varchar', length: 36 })
  id!: string;

  @Column({ name: 'tenant_id', type: 'varchar', length: 36 })
  tenantId!: string;

  @Column({ name: 'order_id', type: 'varchar', length: 36 })
  orderId!: string;

  @Column({ name: 'amount_cents', type: 'bigint', transformer: bigintAsNumber })
  amountCents!: number;

  @Column({ type: 'varchar', length: 3 })
  currency!: Currency;

  @Column({ name: 'provider_key', type: 'varchar', length: 255 })
  providerKey!: string;

  /** `charged` when created; the provider's webhook events move it on (see `payment-status.ts`). */
  @Column({ type: 'varchar', length: 16, default: 'charged' })
  status!: PaymentStatus;

  @Column({ name: 'created_at_ms', type: 'bigint', transformer: bigintAsNumber })
  createdAtMs!: number;
}
