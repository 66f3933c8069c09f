/**
 * The store's own PostgreSQL statements sent straight to the node-postgres client of a TypeORM
 * query runner (past TypeORM's query layer), several at a time where a route's transaction allows
 * it, with the runner's transaction state kept as TypeORM's own `startTransaction` and
 * `commitTransaction` keep it (@internal).
 */
import type { QueryRunner } from 'typeorm';
import type { Row } from './idempotency-record.codec.js';
import {
  answeredByServer,
  PREPARED_STATEMENT_EXISTS,
  PREPARED_STATEMENT_MISSING,
  sqlState,
} from './idempotency-records.sql.js';

/** What a node-postgres query answers (one statement). */
export interface PgResult {
  rows: Row[];
  rowCount: number | null;
  command?: string;
}

/**
 * The few members of node-postgres' `Client` the store uses (typeorm is the only import).
 * `pipeline` (node-postgres 8.23): while true, queries are written without waiting for the
 * previous one's answer, each with its own Sync. `connection.stream`: the socket, corked while a
 * batch is written so that it leaves in one write. `connection.parsedStatements`: the names the
 * client believes the server has prepared (it then sends only Bind).
 */
export interface PgClient {
  query(text: string, values?: unknown[]): Promise<PgResult>;
  query(config: { name?: string; text: string; values?: unknown[] }, callback: PgCallback): void;
  pipeline?: boolean;
  connection?: { stream?: { cork?(): void; uncork?(): void }; parsedStatements?: Record<string, string> };
}

/** How node-postgres answers a query given a callback: at once when it fails it before sending it. */
type PgCallback = (error: Error | null, result: PgResult) => void;

/**
 * One statement of a batch: its text, its parameters when it has any, and the name it is prepared
 * under on the connection (parsed and planned once per connection), if it is to be.
 */
export type PgStatement = readonly [sql: string, params?: readonly unknown[], name?: string];

/**
 * Whether the client has node-postgres 8.23's `pipeline`: a plain boolean field of its own, set by
 * its constructor. Another shape (an older client without it, a later one that made it an accessor
 * or read-only) is left alone, and the statements go one after another.
 */
function pipelines(client: PgClient): boolean {
  const field = Object.getOwnPropertyDescriptor(client, 'pipeline');
  return field?.writable === true && typeof field.value === 'boolean';
}

/**
 * Sends `statements` in order, in one write and, on a node-postgres that pipelines, in one round
 * trip; answers each one's outcome. Each statement has its own Sync, so a failed one does not
 * stop the next from running: inside a transaction block the next fails too (the transaction is
 * aborted), and a COMMIT after a failure answers ROLLBACK. A statement that fails in the client
 * (never sent, so it aborts nothing) stops the batch: the statements behind it are not sent. On
 * a node-postgres without pipelining the statements run one after another, with the same
 * outcomes. `pipeline` is a constructor option of node-postgres that its client reads whenever
 * it sends: it is on for the batch only, on a client the runner holds alone, and off again once
 * every statement has been answered.
 */
export async function sendTogether(
  client: PgClient,
  statements: readonly PgStatement[],
): Promise<PromiseSettledResult<PgResult>[]> {
  if (!pipelines(client)) {
    const outcomes: PromiseSettledResult<PgResult>[] = [];
    for (const statement of statements) {
      const previous = outcomes.at(-1);
      // A failure the server did not answer: the statement never reached it, or the connection is gone.
      const stopped = previous?.status === 'rejected' && !answeredByServer(previous.reason);
      outcomes.push(await settle(stopped ? notSent() : send(client, statement).answer));
    }
    return outcomes;
  }
  const stream = client.connection?.stream;
  const pipelined = client.pipeline;
  client.pipeline = true;
  stream?.cork?.();
  const sent: Promise<PgResult>[] = [];
  try {
    // A statement node-postgres fails before writing it (a parameter it cannot serialize) never
    // reaches the server, so it would not abort the transaction: what follows it (a COMMIT) is
    // not sent either.
    let stopped = false;
    for (const statement of statements) {
      const outgoing: Outgoing = stopped ? { answer: notSent(), unsent: true } : send(client, statement);
      stopped = outgoing.unsent;
      sent.push(outgoing.answer);
    }
  } finally {
    stream?.uncork?.();
  }
  try {
    return await Promise.all(sent.map(settle));
  } finally {
    // Every statement has been answered (a failed one before its ReadyForQuery, which the client
    // still awaits either way): the client is back where the batch found it.
    client.pipeline = pipelined;
  }
}

/**
 * Makes the client's record of the connection's prepared statements (`parsedStatements`) what the
 * server holds, after a statement failed because they differed: the server dropped them (`DISCARD
 * ALL`, `DEALLOCATE ALL`: 26000, the client would only ever send Bind) or has one the client does
 * not know of (a pooler's other connection: 42P05, the client would only ever send Parse).
 */
export async function syncPreparedStatements(client: PgClient): Promise<void> {
  const parsed = client.connection?.parsedStatements;
  if (!parsed) return;
  const { rows } = await client.query('SELECT name, statement FROM pg_prepared_statements WHERE NOT from_sql');
  for (const name of Object.keys(parsed)) delete parsed[name];
  for (const row of rows) parsed[String(row.name)] = String(row.statement);
}

/** The value of a statement `sendTogether` answered, or its error. */
export function valueOf(outcome: PromiseSettledResult<PgResult>): PgResult {
  if (outcome.status === 'rejected') throw outcome.reason;
  return outcome.value;
}

/** A statement on its way, and whether node-postgres failed it before writing it (its callback ran at once). */
interface Outgoing {
  answer: Promise<PgResult>;
  unsent: boolean;
}

function send(client: PgClient, [sql, params, name]: PgStatement): Outgoing {
  let returned = false;
  let unsent = false;
  const answer = new Promise<PgResult>((resolve, reject) => {
    const callback: PgCallback = (error, result) => {
      if (!error) return resolve(result);
      if (!returned) unsent = true;
      // The server and the client disagree on whether it is prepared: one of them would be wrong
      // on every later use. The server is right, and the next use follows it.
      const parsed = client.connection?.parsedStatements;
      if (name && parsed && sqlState(error) === PREPARED_STATEMENT_MISSING) delete parsed[name];
      if (name && parsed && sqlState(error) === PREPARED_STATEMENT_EXISTS) parsed[name] = sql;
      reject(error);
    };
    // No parameters: the simple protocol, one message.
    if (!params || params.length === 0) client.query({ text: sql }, callback);
    else client.query({ name, text: sql, values: [...params] }, callback);
  });
  returned = true;
  return { answer, unsent };
}

function notSent(): Promise<PgResult> {
  return Promise.reject(new Error('Not sent: a statement before it in the batch failed without reaching the server'));
}

function settle(result: Promise<PgResult>): Promise<PromiseSettledResult<PgResult>> {
  return result.then(
    (value) => ({ status: 'fulfilled', value }),
    (reason: unknown) => ({ status: 'rejected', reason }),
  );
}

/** The members of TypeORM's query runners that track a transaction (`BaseQueryRunner`). */
interface TransactionState {
  isTransactionActive: boolean;
  transactionDepth: number;
  broadcaster: { broadcast(event: string): Promise<void> };
}

/**
 * A BEGIN the store sends itself, as `startTransaction` accounts for it: the runner's transaction
 * is active (the handler's nested transactions become savepoints) and subscribers hear of it.
 * Call `begun` once the BEGIN was sent.
 */
export async function beginningTransaction(runner: QueryRunner): Promise<() => Promise<void>> {
  const state = runner as unknown as TransactionState;
  state.isTransactionActive = true;
  await state.broadcaster.broadcast('BeforeTransactionStart');
  return async () => {
    state.transactionDepth = 1;
    await state.broadcaster.broadcast('AfterTransactionStart');
  };
}

/**
 * A COMMIT the store sends itself, as `commitTransaction` accounts for it. Call `ended` once it was
 * answered. A COMMIT that did not commit leaves the transaction active, as a failed
 * `commitTransaction` does: the caller's `rollbackTransaction` then ends it, and subscribers hear
 * the rollback.
 */
export async function committingTransaction(runner: QueryRunner): Promise<(committed: boolean) => Promise<void>> {
  const state = runner as unknown as TransactionState;
  await state.broadcaster.broadcast('BeforeTransactionCommit');
  return async (committed: boolean) => {
    if (!committed) return;
    state.isTransactionActive = false;
    state.transactionDepth = 0;
    await state.broadcaster.broadcast('AfterTransactionCommit');
  };
}

const ISOLATION_LEVELS = new Set(['READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE']);

/** `BEGIN` at an isolation level (one of the four SQL names: it is spelled into the statement), or the default. */
export function beginStatement(isolationLevel: string | undefined): string {
  if (isolationLevel === undefined) return 'BEGIN';
  if (!ISOLATION_LEVELS.has(isolationLevel)) throw new TypeError(`Unknown isolation level: ${isolationLevel}`);
  return `BEGIN ISOLATION LEVEL ${isolationLevel}`;
}
