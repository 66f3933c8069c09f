import { randomUUID } from 'node:crypto';
import { TransactionHost } from '@nestjs-cls/transactional';
import { Injectable } from '@nestjs/common';
import { Clock } from '../common/clock.js';
import { TransactionRunner } from '../database/transaction-runner.js';
import type { OrdersTransactionHost } from '../database/transactions.js';
import type { Currency } from '../orders/currency.js';
import { Payment } from './payment.entity.js';

/** What the caller asks the provider to charge. */
export interface ChargeRequest {
  tenantId: string;
  orderId: string;
  amountCents: number;
  currency: Currency;
  /** The caller's idempotency key at the provider: one key, one charge. */
  providerKey: string;
}

/** The provider refused a key that already paid for a different charge. */
export class PaymentKeyReusedError extends Error {
  constructor() {
    super('This provider key already paid for a different charge; send a new key for a new charge.');
    this.name = this.constructor.name;
  }
}

/** Does a stored charge answer this request (same tenant, order, amount and currency)? */
export function isSameCharge(stored: ChargeRequest, request: ChargeRequest): boolean {
  return (
    stored.tenantId === request.tenantId &&
    stored.orderId === request.orderId &&
    stored.amountCents === request.amountCents &&
    stored.currency === request.currency
  );
}

/**
 * A stand-in for a card provider, with its own table. Like a real provider it is idempotent on
 * the key it receives: the same key with the same charge returns the first charge, with a
 * different charge it is refused, and the unique index makes that hold under races too.
 */
@Injectable()
export class PaymentsService {
  private readonly txHost: OrdersTransactionHost;

  constructor(
    private readonly clock: Clock,
    private readonly db: TransactionRunner,
    txHost: TransactionHost,
  ) {
    this.txHost = txHost as OrdersTransactionHost;
  }

  /** Charges within the current transaction (`TransactionHost.tx`): it commits or rolls back with it. */
  async charge(request: ChargeRequest): Promise<Payment> {
    const payments = this.txHost.tx.getRepository(Payment);
    const candidate = payments.create({
      id: randomUUID(),
      ...request,
      status: 'charged',
      createdAtMs: this.clock.nowMs(),
    });
    // ON CONFLICT DO NOTHING on PostgreSQL, INSERT OR IGNORE on SQLite: a duplicate key never
    // aborts the caller's transaction; the row that holds the key is read back instead.
    await payments.createQueryBuilder().insert().values(candidate).orIgnore().execute();
    const stored = await payments.findOneByOrFail({ providerKey: request.providerKey });
    if (stored.id !== candidate.id && !isSameCharge(stored, request)) {
      throw new PaymentKeyReusedError();
    }
    return stored;
  }

  /** The tenant's charges, newest first. */
  list(tenantId: string): Promise<Payment[]> {
    return this.db.read((manager) =>
      manager.find(Payment, { where: { tenantId }, order: { createdAtMs: 'DESC', id: 'DESC' } }),
    );
  }
}
