import { Body, Controller, Headers, HttpCode, Post, Res } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { Idempotent, IdempotencyContext, IdempotencyContextRef } from 'nestjs-idempotency';
import { Idempotent as PeerIdempotent } from '@node-idempotency/nestjs';
import type { ServerResponse } from 'node:http';
import type { EntityManager } from 'typeorm';
import { BenchOrderDto } from './bench-order.dto.js';
import { BenchOrdersService, type BenchOrderView } from './bench-orders.service.js';

/** Every scenario answers 201 with `Location`, as the sample service does. */
function located(res: ServerResponse, order: BenchOrderView): BenchOrderView {
  res.setHeader('Location', `/orders/${order.id}`);
  return order;
}

/** `plain`: the handler without idempotency. */
@Controller('orders')
export class PlainOrdersController {
  constructor(private readonly orders: BenchOrdersService) {}

  @Post()
  @HttpCode(201)
  async create(
    @Body() dto: BenchOrderDto,
    @Headers('x-tenant-id') tenant: string,
    @Res({ passthrough: true }) res: ServerResponse,
  ) {
    return located(res, await this.orders.create(tenant, dto));
  }
}

/** `plain-tx`: the same INSERT inside an explicit transaction (BEGIN, INSERT, COMMIT): the baseline of a transactional route. */
@Controller('orders')
export class PlainTransactionOrdersController {
  constructor(
    private readonly orders: BenchOrdersService,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  @Post()
  @HttpCode(201)
  async create(
    @Body() dto: BenchOrderDto,
    @Headers('x-tenant-id') tenant: string,
    @Res({ passthrough: true }) res: ServerResponse,
  ) {
    return located(res, await this.dataSource.transaction((manager) => this.orders.create(tenant, dto, manager)));
  }
}

/** `floor-fresh` / `floor-replay`: the hand-written floor (`FloorIdempotencyInterceptor`), bound by the module. */
@Controller('orders')
export class FloorOrdersController {
  constructor(private readonly orders: BenchOrdersService) {}

  @Post()
  @HttpCode(201)
  async create(
    @Body() dto: BenchOrderDto,
    @Headers('x-tenant-id') tenant: string,
    @Res({ passthrough: true }) res: ServerResponse,
  ) {
    return located(res, await this.orders.create(tenant, dto));
  }
}

/** `fresh-redis` / `replay-redis`: this library on Redis. */
@Controller('orders')
export class RedisOrdersController {
  constructor(private readonly orders: BenchOrdersService) {}

  @Post()
  @HttpCode(201)
  @Idempotent({ required: true })
  async create(
    @Body() dto: BenchOrderDto,
    @Headers('x-tenant-id') tenant: string,
    @Res({ passthrough: true }) res: ServerResponse,
  ) {
    return located(res, await this.orders.create(tenant, dto));
  }
}

/** `fresh-durable` / `replay-durable`: Redis plus the durable table, the INSERT in the record's transaction. */
@Controller('orders')
export class DurableOrdersController {
  constructor(private readonly orders: BenchOrdersService) {}

  @Post()
  @HttpCode(201)
  @Idempotent({ required: true, durable: true, transactional: true })
  async create(
    @Body() dto: BenchOrderDto,
    @Headers('x-tenant-id') tenant: string,
    @IdempotencyContext() idem: IdempotencyContextRef,
    @Res({ passthrough: true }) res: ServerResponse,
  ) {
    return located(res, await this.orders.create(tenant, dto, idem.getManager<EntityManager>()));
  }
}

/** `peer-fresh` / `peer-replay`: the same handler behind `@node-idempotency/nestjs` on Redis. */
@Controller('orders')
export class PeerOrdersController {
  constructor(private readonly orders: BenchOrdersService) {}

  @Post()
  @HttpCode(201)
  @PeerIdempotent({ enforceIdempotency: true })
  async create(
    @Body() dto: BenchOrderDto,
    @Headers('x-tenant-id') tenant: string,
    @Res({ passthrough: true }) res: ServerResponse,
  ) {
    return located(res, await this.orders.create(tenant, dto));
  }
}
