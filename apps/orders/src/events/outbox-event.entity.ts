import { Column, Entity, Index, PrimaryColumn } from 'typeorm';
import { bigintAsNumber } from '../database/column-transformers.js';

/** The event types the service publishes. */
export type OutboxEventType = 'order.created';

/**
 * The transactional outbox: an event is written in the same transaction as the change it
 * announces, so it exists if and only if the change committed. The relay hands it to the queue
 * (or processes it in-process) after the commit and then sets `dispatchedAtMs`; an event whose
 * process died in between is still pending, and the next scan of any instance dispatches it.
 */
@Entity({ name: 'outbox_events' })
@Index('IDX_outbox_events_pending', ['dispatchedAtMs', 'createdAtMs'])
export class OutboxEvent {
  /** The event id (a UUID): the job id on the queue, and the consumers' idempotency key. */
  @PrimaryColumn({ type: 'varchar', length: 36 })
  id!: string;

  @Column({ type: 'varchar', length: 64 })
  type!: OutboxEventType;

  @Column({ name: 'tenant_id', type: 'varchar', length: 36 })
  tenantId!: string;

  @Column({ name: 'order_id', type: 'varchar', length: 36 })
  orderId!: string;

  @Column({ name: 'created_at_ms', type: 'bigint', transformer: bigintAsNumber })
  createdAtMs!: number;

  /**
   * The idempotency key the event carries to its consumers: the `derivedKey('order.created')` of
   * the request that wrote it, stable across that request's retries. Null on older events.
   */
  @Column({ name: 'message_key', type: 'varchar', length: 128, nullable: true })
  messageKey!: string | null;

  /** When the relay handed it on; null while pending. */
  @Column({ name: 'dispatched_at_ms', type: 'bigint', nullable: true, transformer: bigintAsNumber })
  dispatchedAtMs!: number | null;
}
