import { IDEMPOTENCY_TYPEORM_MIGRATIONS, IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS } from 'nestjs-idempotency/typeorm';
import { CreateOrdersAndPayments1764000000000 } from './1764000000000-create-orders-and-payments.js';
import { CreatePaymentEvents1764200000000 } from './1764200000000-create-payment-events.js';
import { CreateOutboxAndNotifications1764300000000 } from './1764300000000-create-outbox-and-notifications.js';
import { AddOutboxMessageKey1764400000000 } from './1764400000000-add-outbox-message-key.js';

/**
 * Every migration of the service, oldest first. Run at startup (never `synchronize`).
 * The idempotency library's durable table is created by its own migration.
 */
export const ORDERS_MIGRATIONS = [
  CreateOrdersAndPayments1764000000000,
  ...IDEMPOTENCY_TYPEORM_MIGRATIONS,
  CreatePaymentEvents1764200000000,
  CreateOutboxAndNotifications1764300000000,
  AddOutboxMessageKey1764400000000,
];

/** `ORDERS_MIGRATIONS` with the partitioned idempotency table (`IDEMPOTENCY_PARTITION_MS`) instead of the default one. */
export const ORDERS_MIGRATIONS_PARTITIONED = ORDERS_MIGRATIONS.flatMap((migration) =>
  migration === IDEMPOTENCY_TYPEORM_MIGRATIONS[0]
    ? IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS
    : (IDEMPOTENCY_TYPEORM_MIGRATIONS as readonly unknown[]).includes(migration)
      ? []
      : [migration],
);
