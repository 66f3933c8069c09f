import { randomUUID } from 'node:crypto';
import { TransactionHost } from '@nestjs-cls/transactional';
import { Injectable } from '@nestjs/common';
import { Clock } from '../common/clock.js';
import { ProblemException } from '../common/problem-details/problem-details.js';
import { isUuid } from '../common/tenant/tenant-id.js';
import { TransactionRunner } from '../database/transaction-runner.js';
import type { OrdersTransactionHost } from '../database/transactions.js';
import { OutboxEvent } from '../events/outbox-event.entity.js';
import { PaymentKeyReusedError, PaymentsService } from '../payments/payments.service.js';
import type { CreateOrderDto } from './dto/create-order.dto.js';
import { Order } from './order.entity.js';
import { OrderItem } from './order-item.entity.js';
import { orderTotalCents } from './order-total.js';
import { toOrderView, type OrderView } from './order.view.js';

/** How `create` runs. */
export interface CreateOrderOptions {
  /** Idempotency key sent to the payment provider: the same key never charges twice. */
  providerKey: string;
  /** Idempotency key the `order.created` event carries to its consumers (`outbox_events.message_key`). */
  eventKey?: string;
}

/**
 * Orders of a tenant: create (and charge), read, list. Knows nothing of HTTP or idempotency: it
 * writes through the repositories of the current transaction (`TransactionHost.tx`), which inside
 * a transactional route is the route's own.
 */
@Injectable()
export class OrdersService {
  private readonly txHost: OrdersTransactionHost;

  constructor(
    private readonly payments: PaymentsService,
    private readonly db: TransactionRunner,
    private readonly clock: Clock,
    txHost: TransactionHost,
  ) {
    this.txHost = txHost as OrdersTransactionHost;
  }

  /**
   * Writes the order and its items, charges it and records its `order.created` event, all in one
   * transaction: the caller's if there is one (a transactional route's), else its own.
   */
  create(tenantId: string, dto: CreateOrderDto, options: CreateOrderOptions): Promise<OrderView> {
    return this.db.transaction(() => this.createWithin(tenantId, dto, options));
  }

  /** The tenant's order, or a `not-found` problem (also for another tenant's id, or a non-UUID). */
  async findOne(tenantId: string, id: string): Promise<OrderView> {
    const order = isUuid(id)
      ? await this.db.read((manager) =>
          manager.findOne(Order, { where: { id: id.toLowerCase(), tenantId }, relations: { items: true } }),
        )
      : null;
    if (!order) {
      throw new ProblemException('notFound', 'There is no order with this id for this tenant.');
    }
    return toOrderView(order);
  }

  /** The tenant's orders, newest first (ties broken by id, so the order is stable). */
  async list(tenantId: string): Promise<OrderView[]> {
    const orders = await this.db.read((manager) =>
      manager.find(Order, {
        where: { tenantId },
        relations: { items: true },
        order: { createdAtMs: 'DESC', id: 'DESC' },
      }),
    );
    return orders.map(toOrderView);
  }

  private async createWithin(
    tenantId: string,
    dto: CreateOrderDto,
    { providerKey, eventKey }: CreateOrderOptions,
  ): Promise<OrderView> {
    const orders = this.txHost.tx.getRepository(Order);
    const items = this.txHost.tx.getRepository(OrderItem);
    const order = orders.create({
      id: randomUUID(),
      tenantId,
      customerId: dto.customerId.toLowerCase(),
      currency: dto.currency,
      totalCents: orderTotalCents(dto.items),
      status: 'pending',
      paymentId: null,
      createdAtMs: this.clock.nowMs(),
    });
    await orders.insert(order);
    order.items = dto.items.map((item, position) =>
      items.create({
        orderId: order.id,
        position,
        sku: item.sku,
        quantity: item.quantity,
        unitPriceCents: item.unitPriceCents,
      }),
    );
    await items.insert(order.items);

    const payment = await this.payments
      .charge({ tenantId, orderId: order.id, amountCents: order.totalCents, currency: order.currency, providerKey })
      .catch((error: unknown) => {
        throw error instanceof PaymentKeyReusedError
          ? new ProblemException(
              'paymentKeyReused',
              'The payment provider refused the charge: its key already paid for another charge.',
            )
          : error;
      });
    order.status = 'paid';
    order.paymentId = payment.id;
    await orders.update({ id: order.id }, { status: order.status, paymentId: order.paymentId });
    // The order.created event commits with the order (transactional outbox): it exists if and
    // only if the order does, and the relay publishes it after the commit.
    await this.txHost.tx.getRepository(OutboxEvent).insert({
      id: randomUUID(),
      type: 'order.created',
      tenantId,
      orderId: order.id,
      createdAtMs: this.clock.nowMs(),
      dispatchedAtMs: null,
      messageKey: eventKey ?? null,
    });
    return toOrderView(order);
  }
}
