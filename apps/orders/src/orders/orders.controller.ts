import { randomUUID } from 'node:crypto';
import { Body, Controller, Get, Param, Post, Res } from '@nestjs/common';
import { TenantId } from '../common/tenant/tenant-id.decorator.js';
import { CreateOrderDto } from './dto/create-order.dto.js';
import type { OrderView } from './order.view.js';
import { OrdersService } from './orders.service.js';

/** The part of Express' and Fastify's response objects the controller uses. */
interface HeaderSink {
  header(name: string, value: string): unknown;
}

@Controller('orders')
export class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  /** `POST /orders`: 201, `Location: /orders/{id}`, the order (paid). */
  @Post()
  async create(
    @TenantId() tenantId: string,
    @Body() dto: CreateOrderDto,
    @Res({ passthrough: true }) response: HeaderSink,
  ): Promise<OrderView> {
    // Seam: the idempotency layer replaces this random key with one derived from the request's
    // Idempotency-Key, and passes its transaction's EntityManager as `manager`.
    const order = await this.orders.create(tenantId, dto, { providerKey: randomUUID() });
    response.header('Location', `/orders/${order.id}`);
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
