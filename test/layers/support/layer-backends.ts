import { randomUUID } from 'node:crypto';
import { Column, DataSource, Entity, PrimaryGeneratedColumn, type EntityManager } from 'typeorm';
import {
  MemoryIdempotencyStore,
  type IdempotencyContextRef,
  type IdempotencyModuleOptions,
  type IdempotencyRecord,
  type IdempotencyStore,
} from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import {
  IDEMPOTENCY_TYPEORM_ENTITIES,
  IDEMPOTENCY_TYPEORM_MIGRATIONS,
  TypeOrmIdempotencyStore,
} from 'nestjs-idempotency/typeorm';
import {
  connectPostgresOrFail,
  createThrowawaySchema,
  dropSchema,
  TEST_DATABASE_URL,
} from '../../support/servers/postgres.js';
import { deleteKeys, openRedis, redisUrl } from '../../support/servers/redis.js';

export type LayerBackendName = 'memory' | 'redis' | 'postgres-transactional';

/** The business table of the transactional backend: one row per run that wrote. */
@Entity({ name: 'layer_effects' })
export class LayerEffect {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'varchar', length: 64 })
  tag!: string;

  @Column({ type: 'integer' })
  run!: number;
}

/**
 * Where one app keeps its records and its business writes, and how the test reads both back.
 * On the transactional backend the handler writes a `layer_effects` row through the engine's
 * transaction before it acts, so a release must roll it back; elsewhere a write is counted when
 * the handler succeeds (a non-transactional handler that fails has, by the contract's premise,
 * nothing to undo).
 */
export interface LayerBackend {
  name: LayerBackendName;
  transactional: boolean;
  /** The idempotency module's stores for one app. */
  moduleOptions: Pick<IdempotencyModuleOptions, 'store' | 'durableStore'>;
  /** Called by the handler: before it acts on the transactional backend, once it succeeded elsewhere. */
  write(idem: IdempotencyContextRef, tag: string, run: number): Promise<void>;
  /** Committed business writes of a case. */
  writes(tag: string): Promise<number>;
  /** The authoritative record of a key: the durable row on the transactional backend, else the store's. */
  record(id: string): Promise<IdempotencyRecord | undefined>;
  close(): Promise<void>;
}

function storeBacked(name: LayerBackendName, store: IdempotencyStore, close: () => Promise<void>): LayerBackend {
  const writes = new Map<string, number>();
  return {
    name,
    transactional: false,
    moduleOptions: { store },
    write: async (_idem, tag) => {
      writes.set(tag, (writes.get(tag) ?? 0) + 1);
    },
    writes: async (tag) => writes.get(tag) ?? 0,
    record: (id) => store.get(id),
    close,
  };
}

async function openLayerDataSource(schema: string): Promise<DataSource> {
  const dataSource = await new DataSource({
    type: 'postgres',
    url: TEST_DATABASE_URL,
    schema,
    extra: { options: `-c search_path=${schema}` },
    entities: [...IDEMPOTENCY_TYPEORM_ENTITIES, LayerEffect],
    migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
  }).initialize();
  await dataSource.runMigrations();
  await dataSource.query(
    'CREATE TABLE layer_effects (id serial PRIMARY KEY, tag varchar(64) NOT NULL, run integer NOT NULL)',
  );
  return dataSource;
}

/** Opens a backend on the real servers (Redis under a prefix of its own, PostgreSQL in a throwaway schema). */
export async function openLayerBackend(name: LayerBackendName, label: string): Promise<LayerBackend> {
  if (name === 'memory') return storeBacked(name, new MemoryIdempotencyStore(), async () => undefined);
  if (name === 'redis') {
    const cleaner = await openRedis();
    const prefix = `idem-layers-${label}-${randomUUID().slice(0, 8)}`;
    return storeBacked(name, new RedisIdempotencyStore(redisUrl(), { prefix }), async () => {
      await deleteKeys(cleaner, `${prefix}:`);
      await cleaner.quit();
    });
  }
  await (await connectPostgresOrFail()).end();
  const schema = await createThrowawaySchema(`layers_${label.replaceAll('-', '_')}`);
  const dataSource = await openLayerDataSource(schema);
  const durableStore = new TypeOrmIdempotencyStore(dataSource);
  return {
    name,
    transactional: true,
    moduleOptions: { store: new MemoryIdempotencyStore(), durableStore },
    write: async (idem, tag, run) => {
      await idem.getManager<EntityManager>().getRepository(LayerEffect).insert({ tag, run });
    },
    writes: async (tag) => dataSource.getRepository(LayerEffect).countBy({ tag }),
    record: (id) => durableStore.get(id),
    close: async () => {
      await dataSource.destroy();
      await dropSchema(schema);
    },
  };
}
