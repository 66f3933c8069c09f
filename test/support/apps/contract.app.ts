import {
  Body,
  CanActivate,
  Controller,
  ExecutionContext,
  Get,
  HttpCode,
  HttpException,
  Injectable,
  Param,
  Post,
  Put,
  Res,
  UseGuards,
  type INestApplication,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import {
  Idempotent,
  IdempotencyContext,
  IdempotencyContextRef,
  IdempotencyFinalException,
  IdempotencyModule,
  IdempotencyOutcome,
  IdempotencyTransientException,
  IDEMPOTENCY_CORS,
  type IdempotencyModuleOptions,
  type IdempotencyStore,
} from 'nestjs-idempotency';
import { Module } from '@nestjs/common';
import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import { HeartbeatSwitchStore } from '../stores/heartbeat-switch.store.js';

export type Platform = 'express' | 'fastify';

/** Counts handler runs per request tag, and lets a test hold handlers at a gate. */
@Injectable()
export class Probe {
  runs = 0;
  private seq = 0;
  private gates = new Map<string, { promise: Promise<void>; open: () => void }>();
  readonly contexts: IdempotencyContextRef[] = [];

  next(): number {
    this.runs += 1;
    this.seq += 1;
    return this.seq;
  }

  /**
   * The first handler that reaches gate `name` waits there until `open(name)`; any later one
   * passes straight through (it is the retry, or the winner of a takeover).
   */
  gate(name: string): Promise<void> {
    if (this.gates.has(name)) return Promise.resolve();
    let open!: () => void;
    const promise = new Promise<void>((resolve) => (open = resolve));
    this.gates.set(name, { promise, open });
    return promise;
  }

  private readonly seen = new Set<string>();

  /** True the first time it is asked about `name`. */
  firstTime(name: string): boolean {
    if (this.seen.has(name)) return false;
    this.seen.add(name);
    return true;
  }

  /** Opens gate `name`; a gate opened before any handler reached it lets every handler pass. */
  open(name: string): void {
    const gate = this.gates.get(name);
    if (gate) gate.open();
    else this.gates.set(name, { promise: Promise.resolve(), open: () => undefined });
  }
}

@Injectable()
class DenyGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string> }>();
    if (request.headers['x-auth'] === 'deny') throw new HttpException({ message: 'denied' }, 401);
    return true;
  }
}

interface Charge {
  amount?: unknown;
  gate?: string;
  status?: number;
}

/**
 * Rule 2: a controller-wide `@Idempotent()` covers every route of the controller, and the methods
 * outside `methods` pass through untouched. (On the handler itself, such a route is refused at
 * startup: first-hour-startup.e2e-spec.ts.)
 */
@Controller()
@Idempotent()
class ChargeReadsController {
  constructor(private readonly probe: Probe) {}

  @Get('charges')
  list() {
    return { seq: this.probe.next() };
  }

  @Put('charges/:id')
  replace(@Param('id') id: string) {
    return { id, seq: this.probe.next() };
  }
}

@Controller()
class ChargesController {
  constructor(private readonly probe: Probe) {}

  @Post('charges')
  @UseGuards(DenyGuard)
  @Idempotent()
  async create(@Body() body: Charge, @Res({ passthrough: true }) res: HeaderWriter) {
    if (body?.gate) await this.probe.gate(body.gate);
    const seq = this.probe.next();
    setHeader(res, 'Location', `/charges/${seq}`);
    setHeader(res, 'ETag', `"v${seq}"`);
    setHeader(res, 'X-Order-Seq', String(seq));
    setHeader(res, 'Set-Cookie', `session=${seq}; HttpOnly`);
    setHeader(res, 'X-Request-Id', `req-${seq}`);
    return { id: `ch_${seq}`, seq, amount: body?.amount ?? null, note: 'é ✓' };
  }

  @Post('charges/other-operation')
  @Idempotent()
  other(@Body() body: Charge) {
    return { seq: this.probe.next(), amount: body?.amount ?? null };
  }

  @Post('unprotected')
  unprotected() {
    return { seq: this.probe.next() };
  }

  @Post('required')
  @Idempotent({ required: true })
  required() {
    return { seq: this.probe.next() };
  }

  @Post('strict')
  @Idempotent({ keySyntax: 'sf-string' })
  strict() {
    return { seq: this.probe.next() };
  }

  @Post('status/:status')
  @Idempotent()
  fail(@Param('status') status: string) {
    const seq = this.probe.next();
    throw new HttpException({ message: 'failed', seq }, Number(status));
  }

  @Post('final')
  @Idempotent()
  final() {
    const seq = this.probe.next();
    throw new IdempotencyFinalException({ message: 'declined for good', seq }, 503);
  }

  @Post('transient')
  @Idempotent()
  transient() {
    const seq = this.probe.next();
    throw new IdempotencyTransientException({ message: 'try again', seq }, 402);
  }

  @Post('released-by-route')
  @Idempotent()
  @IdempotencyOutcome('release')
  @HttpCode(200)
  releasedByRoute() {
    return { seq: this.probe.next() };
  }

  @Post('released-by-context')
  @Idempotent()
  releasedByContext(@IdempotencyContext() idem: IdempotencyContextRef) {
    idem.setOutcome('release');
    return { seq: this.probe.next() };
  }

  @Post('big')
  @Idempotent({ maxStoredResponseBytes: 64 })
  big(@Res({ passthrough: true }) res: HeaderWriter) {
    const seq = this.probe.next();
    setHeader(res, 'Location', `/big/${seq}`);
    return { seq, padding: 'x'.repeat(200) };
  }

  @Post('wait')
  @Idempotent({ inProgress: { mode: 'wait', maxWaitMs: 10_000 } })
  async wait(@Body() body: Charge) {
    if (body?.gate) await this.probe.gate(body.gate);
    return { seq: this.probe.next() };
  }

  @Post('tenant-scope/a')
  @Idempotent({ scope: ['tenant'] })
  tenantScopeA(@Body() body: Charge) {
    return { seq: this.probe.next(), amount: body?.amount ?? null };
  }

  @Post('tenant-scope/b')
  @Idempotent({ scope: ['tenant'] })
  tenantScopeB(@Body() body: Charge) {
    return { seq: this.probe.next(), amount: body?.amount ?? null };
  }

  @Post('short-ttl')
  @Idempotent({ ttlMs: 400, leaseMs: 200, heartbeatMs: 50 })
  async shortTtl(@Body() body: Charge) {
    if (body?.gate) await this.probe.gate(body.gate);
    return { seq: this.probe.next() };
  }

  /** Writes its own response (no passthrough) and waits until it has gone out. */
  @Post('own-response')
  @Idempotent()
  async ownResponse(
    @Res() res: { raw?: ServerResponse } & ServerResponse & { code?: (n: number) => { send(b: unknown): void } },
  ) {
    const seq = this.probe.next();
    const raw = res.raw ?? res;
    const finished = once(raw, 'finish');
    const body = JSON.stringify({ seq });
    if (res.raw && res.code) res.code(201).send(body);
    else {
      raw.statusCode = 201;
      raw.setHeader('Content-Type', 'application/json');
      raw.end(body);
    }
    await finished;
  }

  @Post('short-lease')
  @Idempotent({ ttlMs: 60_000, leaseMs: 300, heartbeatMs: 100 })
  async shortLease(@Body() body: Charge, @IdempotencyContext() idem: IdempotencyContextRef) {
    this.probe.contexts.push(idem);
    if (body?.gate) await this.probe.gate(body.gate);
    return { seq: this.probe.next(), fencing: idem.fencingToken, tookOver: idem.tookOver };
  }

  @Post('stale-fail')
  @Idempotent({ ttlMs: 60_000, leaseMs: 300, heartbeatMs: 100, staleLock: 'fail' })
  async staleFail(@Body() body: Charge) {
    if (body?.gate) await this.probe.gate(body.gate);
    return { seq: this.probe.next() };
  }

  @Post('fail-open')
  @Idempotent({ onStoreError: 'fail-open' })
  failOpen() {
    return { seq: this.probe.next() };
  }

  @Post('versioned')
  @Idempotent({ fingerprint: { headers: ['Api-Version'] } })
  versioned() {
    return { seq: this.probe.next() };
  }

  @Post('custom-fingerprint')
  @Idempotent({ fingerprint: (req) => String((req.body as { orderRef?: string } | undefined)?.orderRef ?? '') })
  customFingerprint() {
    return { seq: this.probe.next() };
  }

  @Post('no-content')
  @Idempotent()
  @HttpCode(204)
  noContent() {
    this.probe.next();
  }

  @Post('context')
  @Idempotent()
  context(@Body() body: { release?: boolean }, @IdempotencyContext() idem: IdempotencyContextRef | undefined) {
    if (body?.release) idem?.setOutcome('release');
    return { seq: this.probe.next(), payment: idem?.derivedKey('payment') ?? null, keyHash: idem?.keyHash ?? null };
  }
}

/**
 * The transactional route, served only by apps given a `durableStore`: a durable route in a module
 * without one stops the application at startup.
 */
@Controller()
class TransactionalEffectsController {
  constructor(private readonly probe: Probe) {}

  /** Transactional: one row in `effects` per run, written through the engine's transaction. */
  @Post('tx-effect')
  @Idempotent({ transactional: true, ttlMs: 60_000, leaseMs: 300, heartbeatMs: 100 })
  async txEffect(
    @Body() body: { ref?: string; fail?: number; failOnce?: number; gate?: string; release?: boolean },
    @IdempotencyContext() idem: IdempotencyContextRef,
  ) {
    const seq = this.probe.next();
    const manager = idem.getManager<{ query(sql: string, params: unknown[]): Promise<unknown> }>();
    await manager.query('INSERT INTO effects (ref, seq) VALUES ($1, $2)', [body?.ref ?? '', seq]);
    if (body?.gate) await this.probe.gate(body.gate);
    if (body?.release) idem.setOutcome('release');
    if (body?.fail) throw new HttpException({ message: 'failed after the write', seq }, body.fail);
    if (body?.failOnce && this.probe.firstTime(`fail:${body.ref}`)) {
      throw new HttpException({ message: 'failed after the write', seq }, body.failOnce);
    }
    return { seq, fencing: idem.fencingToken, tookOver: idem.tookOver };
  }
}

/** The response's header setter: Express's `setHeader`, or Fastify's `header` (with its `raw`). */
interface HeaderWriter {
  setHeader?: (name: string, value: string) => unknown;
  header?: (name: string, value: string) => unknown;
}

function setHeader(res: HeaderWriter, name: string, value: string): void {
  if (typeof res.header === 'function' && (res as { raw?: unknown }).raw) res.header(name, value);
  else res.setHeader!(name, value);
}

export interface ContractApp {
  app: INestApplication;
  url: string;
  probe: Probe;
  /** Freezes lease renewals, to turn a running handler into a zombie. */
  heartbeats: HeartbeatSwitchStore;
}

/**
 * The contract fixture on a real socket: tenant from `X-Tenant-ID`, principal from `X-User-ID`.
 * `/tx-effect` is served only when `options` has a `durableStore`.
 */
export async function startContractApp(
  platform: Platform,
  store: IdempotencyStore,
  options: Partial<IdempotencyModuleOptions> = {},
): Promise<ContractApp> {
  const heartbeats = new HeartbeatSwitchStore(store);
  @Module({
    imports: [
      IdempotencyModule.forRoot({
        store: heartbeats,
        tenant: (req) => req.headers['x-tenant-id'] as string | undefined,
        principal: (req) => req.headers['x-user-id'] as string | undefined,
        problemTypeBaseUri: 'https://docs.example.test/problems/',
        ...options,
      }),
    ],
    controllers: options.durableStore
      ? [ChargesController, ChargeReadsController, TransactionalEffectsController]
      : [ChargesController, ChargeReadsController],
    providers: [Probe, DenyGuard],
  })
  class ContractModule {}

  const app =
    platform === 'express'
      ? await NestFactory.create(ContractModule, { rawBody: true, logger: false })
      : await NestFactory.create(ContractModule, new FastifyAdapter(), { rawBody: true, logger: false });
  app.enableCors({
    allowedHeaders: ['Content-Type', 'X-Tenant-ID', 'X-User-ID', ...IDEMPOTENCY_CORS.allowedHeaders],
    exposedHeaders: [...IDEMPOTENCY_CORS.exposedHeaders],
  });
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return { app, url, probe: app.get(Probe), heartbeats };
}
