// `node bench/durable-route.mjs [--plain-tx]`: the TypeORM store's transactional route alone, in
// one process, against PostgreSQL at TEST_DATABASE_URL (no HTTP, no Redis, no load generator):
// claimInTransaction, the savepoint, a one-row business INSERT through the transaction's manager,
// complete and commit, 10 at a time, as the engine runs them. Prints CPU µs and wall µs per
// route transaction, with the statements and round trips it sent (medians of 5 rounds of 3,000).
// `--plain-tx`: the same INSERT in TypeORM's `manager.transaction()`, the floor. Builds the library first.
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { repoRoot } from './build.mjs';

execFileSync(process.execPath, [join(repoRoot, 'libs/idempotency/scripts/build.mjs')], { stdio: 'ignore' });
const { default: pg } = await import('pg');
const { DataSource } = await import('typeorm');
const { IDEMPOTENCY_TYPEORM_ENTITIES, IDEMPOTENCY_TYPEORM_MIGRATIONS, TypeOrmIdempotencyStore } =
  await import('nestjs-idempotency/typeorm');

const url = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const plainTx = process.argv.includes('--plain-tx');
const CONCURRENCY = 10;

// A statement sent while its connection awaits no other answer starts a round trip (bench/app/statement-counter.ts).
let statements = 0;
let roundTrips = 0;
const query = pg.Client.prototype.query;
pg.Client.prototype.query = function (...args) {
  statements++;
  if (!this._activeQuery) roundTrips++;
  return query.apply(this, args);
};

const schema = `bench_route_${randomUUID().slice(0, 8)}`;
const admin = new pg.Client(url);
await admin.connect();
await admin.query(`CREATE SCHEMA ${schema}`);
const dataSource = await new DataSource({
  type: 'postgres',
  url,
  schema,
  extra: { options: `-c search_path=${schema}`, max: CONCURRENCY },
  entities: IDEMPOTENCY_TYPEORM_ENTITIES,
  migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
}).initialize();
try {
  await dataSource.runMigrations();
  await dataSource.query('CREATE TABLE orders (id uuid PRIMARY KEY, body text NOT NULL)');
  const store = new TypeOrmIdempotencyStore(dataSource);
  const body = '{"id":"…"}'.padEnd(310, ' ');
  const response = { statusCode: 201, headers: { 'content-type': 'application/json' }, body: Buffer.from(body) };
  const insert = (manager) => manager.query('INSERT INTO orders (id, body) VALUES ($1, $2)', [randomUUID(), body]);

  const routeTransaction = async () => {
    if (plainTx) return dataSource.manager.transaction(insert);
    const request = { ownerToken: randomUUID(), fingerprint: 'f'.repeat(43), leaseMs: 30_000, ttlMs: 86_400_000 };
    const claim = await store.claimInTransaction(randomUUID(), request, { commitOnComplete: true });
    if (claim.kind !== 'claimed') throw new Error(`expected a claim, got ${claim.kind}`);
    const { transaction } = claim;
    await transaction.savepoint();
    await transaction.run(() => insert(transaction.manager));
    if (!(await transaction.complete(response))) throw new Error('the completion changed no row');
    await transaction.commit();
  };

  const round = async (count) => {
    let left = count;
    const cpuBefore = process.cpuUsage();
    const [statementsBefore, tripsBefore, startedAt] = [statements, roundTrips, performance.now()];
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (left-- > 0) await routeTransaction();
      }),
    );
    const cpu = process.cpuUsage(cpuBefore);
    return {
      cpuMicros: (cpu.user + cpu.system) / count,
      wallMicros: ((performance.now() - startedAt) * 1000) / count,
      statements: (statements - statementsBefore) / count,
      roundTrips: (roundTrips - tripsBefore) / count,
    };
  };

  await round(1_000); // warm-up
  const rounds = [];
  for (let i = 0; i < 5; i++) rounds.push(await round(3_000));
  const median = (pick) => rounds.map(pick).sort((a, b) => a - b)[2];
  console.log(
    `${plainTx ? 'plain transaction' : 'transactional route'}: ${Math.round(median((r) => r.cpuMicros))} CPU µs, ` +
      `${Math.round(median((r) => r.wallMicros))} wall µs per transaction (${CONCURRENCY} at a time), ` +
      `${median((r) => r.statements)} statements in ${median((r) => r.roundTrips)} round trips; ` +
      `CPU µs by round: ${rounds.map((r) => Math.round(r.cpuMicros)).join(', ')}`,
  );
} finally {
  await dataSource.destroy();
  await admin.query(`DROP SCHEMA ${schema} CASCADE`);
  await admin.end();
}
