import { Body, Controller, Get, Param, Post, Res } from '@nestjs/common';
import { Idempotent, IdempotencyContext, IdempotencyContextRef } from 'nestjs-idempotency';
import { OutboxRelay } from '../events/outbox.relay.js';
import { TenantId } from '../common/tenant/tenant-id.decorator.js';
import { CreateOrderDto } from './dto/create-order.dto.js';
import type { OrderView } from './order.view.js';
import { OrdersService } from './orders.service.js';

/** The part of Express' and Fastify's response objects the controller uses. */
interface HeaderSink {
  header(name: string, value: string): unknown;
  /** Express: the response itself; Fastify: `raw`. */
  once?(event: 'finish', listener: () => void): unknown;
  raw?: { once(event: 'finish', listener: () => void): unknown };
}

@Controller('orders')
export class OrdersController {
  constructor(
    private readonly orders: OrdersService,
    private readonly outbox: OutboxRelay,
  ) {}

  /**
   * `POST /orders`: 201, `Location: /orders/{id}`, the order (paid). `Idempotency-Key` is
   * required. The order, its charge and the completed idempotency record commit in one
   * transaction (`transactional`), and the payment provider gets a key derived from the
   * Idempotency-Key, so even a re-run of this handler cannot charge twice. The order's
   * `order.created` event commits with it (outbox) and is handed to the queue once the response
   * has gone out, which is after the commit.
   */
  @Post()
  @Idempotent({ required: true, operation: 'orders.create', transactional: true })
  async create(
    @TenantId() tenantId: string,
    @Body() dto: CreateOrderDto,
    @Res({ passthrough: true }) response: HeaderSink,
    @IdempotencyContext() idempotency: IdempotencyContextRef,
  ): Promise<OrderView> {
    const order = await this.orders.create(tenantId, dto, {
      providerKey: idempotency.derivedKey('payment'),
      // Carried to the event's consumers (a message header on RabbitMQ): the same boundary as this request.
      eventKey: idempotency.derivedKey('order.created'),
      // No manager to pass: OrdersService writes through TransactionHost, which inside this route
      // is the route's transaction (see database/transactions.ts).
    });
    response.header('Location', `/orders/${order.id}`);
    // The idempotency layer sends the response only after its transaction committed.
    (response.raw ?? response).once?.('finish', () => this.outbox.kick());
    return order;
  }

  /** `GET /orders`: the tenant's orders, newest first. */
  @Get()
  list(@TenantId() tenantId: string): Promise<OrderView[]> {
    return this.orders.list(tenantId);
  }

  /** `GET /orders/:id`: the order, or 404 (unknown id, another tenant's, or not a UUID). */
  @Get(':id')
  findOne(@TenantId() tenantId: string, @Param('id') id: string): Promise<OrderView> {
    return this.orders.findOne(tenantId, id);
  }
}
