/** The servers the scenarios run against: only the idempotency layer (or the transaction) differs. */
export type BenchServerKind = 'plain' | 'plain-tx' | 'redis' | 'durable' | 'durable-mariadb' | 'peer' | 'floor';

export const BENCH_SERVER_KINDS: readonly BenchServerKind[] = [
  'plain',
  'plain-tx',
  'redis',
  'durable',
  'durable-mariadb',
  'peer',
  'floor',
];

/** What a bench server process reads from its environment. */
export interface BenchServerConfig {
  kind: BenchServerKind;
  /** PostgreSQL's, or for `durable-mariadb` MariaDB's (mysql://…/<database>). */
  databaseUrl: string;
  /** The throwaway schema holding `bench_orders` and `idempotency_records` (MariaDB: the database). */
  schema: string;
  redisUrl: string;
  /** Namespace of this process's Redis keys, so memory can be measured per scenario. */
  redisPrefix: string;
}

/** Parses the environment the driver passes to a server process. */
export function benchServerConfigFrom(env: NodeJS.ProcessEnv): BenchServerConfig {
  const kind = env.BENCH_SERVER as BenchServerKind;
  if (!BENCH_SERVER_KINDS.includes(kind))
    throw new Error(`BENCH_SERVER must be one of ${BENCH_SERVER_KINDS.join(', ')}`);
  const need = (name: string): string => {
    const value = env[name];
    if (!value) throw new Error(`${name} is required`);
    return value;
  };
  return {
    kind,
    databaseUrl: need('DATABASE_URL'),
    schema: need('BENCH_SCHEMA'),
    redisUrl: need('REDIS_URL'),
    redisPrefix: need('BENCH_REDIS_PREFIX'),
  };
}
