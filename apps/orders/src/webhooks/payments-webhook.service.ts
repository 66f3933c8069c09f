import { Injectable } from '@nestjs/common';
import { IdempotencyService, type IdempotencyContextRef } from 'nestjs-idempotency';
import type { EntityManager } from 'typeorm';
import { Clock } from '../common/clock.js';
import { ProblemException } from '../common/problem-details/problem-details.js';
import { isUuid } from '../common/tenant/tenant-id.js';
import { TransactionRunner } from '../database/transaction-runner.js';
import { Payment } from '../payments/payment.entity.js';
import { statusesBefore, targetStatus } from '../payments/payment-status.js';
import type { PaymentEventInput } from './payment-event.js';
import { PaymentEvent } from './payment-event.entity.js';
import { toPaymentEventView, type PaymentEventView } from './payment-event.view.js';

/** The idempotency operation (the consumer's name) under which provider event ids are unique. */
export const PAYMENTS_WEBHOOK_OPERATION = 'webhooks.payments';

/** What `POST /webhooks/payments` answers with its 200. */
export interface WebhookReceipt {
  received: true;
  /** True when this event id was already applied: nothing was done this time. */
  duplicate: boolean;
  /** Present (true) when the event type is not one this service handles: acknowledged, not applied. */
  ignored?: true;
}

/**
 * Applies the payment provider's events, each event id once. The event row, the payment's new
 * status and the completed idempotency record commit in one transaction (`transactional`), so
 * a crash anywhere leaves either all three or none, and the provider's next delivery applies
 * the event or is acknowledged as a duplicate.
 */
@Injectable()
export class PaymentsWebhookService {
  constructor(
    private readonly idempotency: IdempotencyService,
    private readonly db: TransactionRunner,
    private readonly clock: Clock,
  ) {}

  /**
   * Applies `event` once per event id. Deliveries of one id that arrive while the first is being
   * applied wait for it (up to 5 s) and are answered as duplicates. Rejects with
   * `IdempotencyRunError` (another body under the same id; still in progress after the wait),
   * `IdempotencyStoreError`, or a `not-found` problem for a payment this service does not know
   * (not recorded: a later delivery is applied if the payment exists by then).
   */
  async receive(event: PaymentEventInput, rawBody: Buffer): Promise<WebhookReceipt> {
    const result = await this.idempotency.run(
      {
        operation: PAYMENTS_WEBHOOK_OPERATION,
        key: event.id,
        fingerprint: rawBody,
        options: { transactional: true, inProgress: { mode: 'wait', maxWaitMs: 5000 } },
      },
      (context) => this.apply(event, context),
    );
    return { received: true, duplicate: result.status === 'replayed' };
  }

  /** The events applied to the tenant's payment, oldest first; `not-found` for another tenant's. */
  async listEvents(tenantId: string, paymentId: string): Promise<PaymentEventView[]> {
    const events = await this.db.read(async (manager) => {
      const payment = isUuid(paymentId)
        ? await manager.findOneBy(Payment, { id: paymentId.toLowerCase(), tenantId })
        : null;
      if (!payment) {
        return undefined;
      }
      return manager.find(PaymentEvent, {
        where: { tenantId, paymentId: payment.id },
        order: { receivedAtMs: 'ASC', id: 'ASC' },
      });
    });
    if (!events) {
      throw new ProblemException('notFound', 'There is no payment with this id for this tenant.');
    }
    return events.map(toPaymentEventView);
  }

  private async apply(event: PaymentEventInput, context: IdempotencyContextRef): Promise<PaymentEventView> {
    const manager = context.getManager<EntityManager>();
    const payment = isUuid(event.paymentId)
      ? await manager.findOneBy(Payment, { id: event.paymentId.toLowerCase() })
      : null;
    if (!payment) {
      // Released, not stored: the provider retries, and the payment may exist by then (an event
      // can overtake the commit of the charge it is about).
      context.setOutcome('release');
      throw new ProblemException('notFound', 'The event names a payment this service does not know.');
    }
    const row = manager.create(PaymentEvent, {
      id: event.id,
      tenantId: payment.tenantId,
      paymentId: payment.id,
      type: event.type,
      receivedAtMs: this.clock.nowMs(),
    });
    await manager.insert(PaymentEvent, row);
    await manager
      .createQueryBuilder()
      .update(Payment)
      .set({ status: targetStatus(event.type) })
      .where('id = :id AND status IN (:...from)', { id: payment.id, from: statusesBefore(event.type) })
      .execute();
    return toPaymentEventView(row);
  }
}
