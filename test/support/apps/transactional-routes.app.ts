import { randomUUID } from 'node:crypto';
import { ClsPluginTransactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import {
  Body,
  Controller,
  HttpException,
  Injectable,
  Module,
  Post,
  ServiceUnavailableException,
  type INestApplication,
  type LoggerService,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { ClsModule } from 'nestjs-cls';
import {
  IdempotencyContext,
  IdempotencyContextRef,
  IdempotencyModule,
  Idempotent,
  MemoryIdempotencyStore,
} from 'nestjs-idempotency';
import { IdempotencyClsTransactions } from 'nestjs-idempotency/cls';
import { TypeOrmIdempotencyStore, type TypeOrmIdempotencyStoreOptions } from 'nestjs-idempotency/typeorm';
import { Column, DataSource, Entity, PrimaryColumn, type EntityManager } from 'typeorm';

/**
 * Transactional routes as Nest code writes them (issue 24): a service that writes through
 * `@nestjs-cls/transactional`'s `TransactionHost`, a write through a plain repository of the
 * DataSource, a nested transaction at a stronger isolation level, and routes at SERIALIZABLE.
 */
@Entity('tx_effects')
export class Effect {
  @PrimaryColumn({ type: 'varchar' })
  id!: string;
  @Column({ type: 'varchar' })
  ref!: string;
}

/** Rendezvous points: each request that names `gate` waits until `count` requests have reached it. */
export class Gates {
  private readonly waiting = new Map<string, { count: number; open: () => void; opened: Promise<void> }>();

  arrive(name: string | undefined, count = 2): Promise<void> {
    if (!name) return Promise.resolve();
    let gate = this.waiting.get(name);
    if (!gate) {
      let open!: () => void;
      const opened = new Promise<void>((resolve) => (open = resolve));
      gate = { count: 0, open, opened };
      this.waiting.set(name, gate);
    }
    gate.count += 1;
    if (gate.count >= count) gate.open();
    return gate.opened;
  }

  /** How many requests have reached `name` so far. */
  arrivals(name: string): number {
    return this.waiting.get(name)?.count ?? 0;
  }
}

@Injectable()
class EffectsService {
  constructor(private readonly txHost: TransactionHost) {}

  /** Writes through the current transaction, never handed a manager. */
  async record(ref: string): Promise<void> {
    await (this.txHost.tx as EntityManager).getRepository(Effect).insert({ id: randomUUID(), ref });
  }
}

interface RouteBody {
  ref: string;
  fail?: boolean;
  account?: string;
  amount?: number;
  gate?: string;
}

@Controller()
class TransactionalRoutesController {
  constructor(
    private readonly effects: EffectsService,
    private readonly dataSource: DataSource,
    private readonly gates: Gates,
  ) {}

  @Post('cls')
  @Idempotent({ required: true, transactional: true, operation: 'effects.cls' })
  async cls(@Body() body: RouteBody) {
    await this.effects.record(body.ref);
    if (body.fail) throw new ServiceUnavailableException('failed after its write');
    return { ok: true };
  }

  @Post('outside')
  @Idempotent({ required: true, transactional: true, operation: 'effects.outside' })
  async outside(@Body() body: RouteBody) {
    await this.dataSource.getRepository(Effect).insert({ id: randomUUID(), ref: body.ref });
    return { ok: true };
  }

  @Post('stronger')
  @Idempotent({ required: true, transactional: true, operation: 'effects.stronger' })
  async stronger(@IdempotencyContext() idempotency: IdempotencyContextRef) {
    try {
      await idempotency.getManager<EntityManager>().transaction('SERIALIZABLE', async () => undefined);
      return { error: null };
    } catch (error) {
      return { error: (error as Error).name, message: (error as Error).message };
    }
  }

  /** Reads the balance, waits for the other debit, then takes `amount` off (402 when it is short). */
  @Post('debit')
  @Idempotent({ required: true, transactional: true, isolationLevel: 'SERIALIZABLE', operation: 'accounts.debit' })
  async debit(@Body() body: RouteBody, @IdempotencyContext() idempotency: IdempotencyContextRef) {
    const manager = idempotency.getManager<EntityManager>();
    const [row] = (await manager.query('SELECT balance FROM accounts WHERE id = $1', [body.account])) as {
      balance: number;
    }[];
    await this.gates.arrive(body.gate);
    if (row.balance < body.amount!) throw new HttpException('insufficient funds', 402);
    await manager.query('UPDATE accounts SET balance = balance - $2 WHERE id = $1', [body.account, body.amount]);
    return { balance: row.balance - body.amount! };
  }

  /** Write skew: reads every on-call row, then takes its own off call; both commit only one at a time. */
  @Post('skew')
  @Idempotent({ required: true, transactional: true, isolationLevel: 'SERIALIZABLE', operation: 'oncall.leave' })
  async skew(@Body() body: RouteBody, @IdempotencyContext() idempotency: IdempotencyContextRef) {
    const manager = idempotency.getManager<EntityManager>();
    const [{ n }] = (await manager.query('SELECT count(*)::int AS n FROM oncall WHERE on_call')) as { n: number }[];
    await this.gates.arrive(body.gate && `${body.gate}:read`);
    if (n > 1) await manager.query('UPDATE oncall SET on_call = false WHERE id = $1', [body.account]);
    await this.gates.arrive(body.gate && `${body.gate}:written`);
    return { onCall: n };
  }
}

export interface TransactionalRoutesApp {
  app: INestApplication;
  url: string;
  gates: Gates;
}

/**
 * The fixture on `dataSource` (its `tx_effects` table created by the caller), with
 * `@nestjs-cls/transactional` joined to the route transactions when `cls` is true.
 */
export async function startTransactionalRoutesApp(
  dataSource: DataSource,
  options: { cls: boolean; logger?: LoggerService; store?: TypeOrmIdempotencyStoreOptions },
): Promise<TransactionalRoutesApp> {
  const transactions = new IdempotencyClsTransactions();
  const gates = new Gates();
  const dataSourceModule = {
    module: class DataSourceModule {},
    global: true,
    providers: [
      { provide: DataSource, useValue: dataSource },
      { provide: Gates, useValue: gates },
    ],
    exports: [DataSource, Gates],
  };
  const adapter = new TransactionalAdapterTypeOrm({ dataSourceToken: DataSource });
  @Module({
    imports: [
      dataSourceModule,
      ClsModule.forRoot({
        global: true,
        plugins: [new ClsPluginTransactional({ adapter: options.cls ? transactions.adapter(adapter) : adapter })],
      }),
      IdempotencyModule.forRootAsync({
        inject: [TransactionHost],
        useFactory: (txHost: TransactionHost) => ({
          scope: ['operation'],
          store: new MemoryIdempotencyStore(),
          durableStore: new TypeOrmIdempotencyStore(dataSource, {
            ...options.store,
            propagate: options.cls ? transactions.propagateTo(txHost) : undefined,
          }),
        }),
      }),
    ],
    controllers: [TransactionalRoutesController],
    providers: [EffectsService],
  })
  class TransactionalRoutesModule {}
  const moduleRef = await Test.createTestingModule({ imports: [TransactionalRoutesModule] }).compile();
  if (options.logger) moduleRef.useLogger(options.logger);
  const app = moduleRef.createNestApplication();
  await app.listen(0, '127.0.0.1');
  return { app, url: (await app.getUrl()).replace('[::1]', '127.0.0.1'), gates };
}
