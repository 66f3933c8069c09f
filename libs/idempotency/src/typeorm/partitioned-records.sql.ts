/**
 * The SQL of the opt-in partitioned durable table (PostgreSQL only): the table, RANGE-partitioned
 * by `created_at_ms`, its claim function, and the statements that differ from the default
 * table's (@internal: not exported by the entry point). Protocol: model/durable-partitioned.pml;
 * design and numbers: docs/capacity.md, "The partitioned table".
 */
import { IDEMPOTENCY_RECORDS_TABLE } from './idempotency-record.entity.js';
import { RECORD_COLUMNS, SAVED_LOCK_TIMEOUT, statementsFor, type Statements } from './idempotency-records.sql.js';

/** SQLSTATE `check_violation`, which an INSERT raises when no partition covers its row. */
export const NO_PARTITION_FOR_ROW = '23514';

/** The qualified names the partitioned table's SQL is written with. @internal */
export interface PartitionedNames {
  /** The parent table, quoted and schema-qualified. */
  readonly table: string;
  /** The claim function, quoted and schema-qualified. */
  readonly claimFunction: string;
  /** The schema the partitions are created in, quoted; undefined: the connection's search path. */
  readonly schema?: string;
}

/** The claim function's unqualified name. */
export const PARTITIONED_CLAIM_FUNCTION = 'idempotency_records_claim';

/**
 * The parent table and the claim function. The primary key must hold the partition key, so it is
 * `("key", created_at_ms)`: unique per partition only. Across partitions, one live row per key
 * is kept by the claim function, which every claim goes through.
 */
export function partitionedTableDdl(names: PartitionedNames): string[] {
  const { table, claimFunction } = names;
  return [
    `CREATE TABLE ${table} (
      "key" varchar(64) NOT NULL, state varchar(16) NOT NULL, fingerprint varchar(64) NOT NULL,
      owner_token varchar(64) NOT NULL, fencing_token integer NOT NULL, created_at_ms bigint NOT NULL,
      lease_expires_at_ms bigint NOT NULL, expires_at_ms bigint NOT NULL, response_status integer,
      response_headers text, response_body bytea, response_body_omitted boolean NOT NULL DEFAULT false,
      CONSTRAINT "PK_idempotency_records" PRIMARY KEY ("key", created_at_ms)
    ) PARTITION BY RANGE (created_at_ms)`,
    `CREATE INDEX "IDX_idempotency_records_expires" ON ${table} (expires_at_ms)`,
    `CREATE INDEX "IDX_idempotency_records_in_progress" ON ${table} (state, created_at_ms)`,
    // Each statement of a PL/pgSQL function takes a fresh snapshot under READ COMMITTED: the read
    // after the lock sees every claim of the key that committed before the lock was granted.
    `CREATE FUNCTION ${claimFunction}(p_key varchar, p_fingerprint varchar, p_owner varchar,
        p_lease_ms bigint, p_ttl_ms bigint, p_lock_timeout_ms integer)
      RETURNS SETOF ${table} LANGUAGE plpgsql AS $claim$
    DECLARE
      now_ms bigint;
      previous_token integer;
    BEGIN
      -- The caller's lock_timeout is kept for the restore after the claim (a route's handler); a
      -- second call in the transaction (a claim tried again) must not save the first one's.
      IF coalesce(current_setting('${SAVED_LOCK_TIMEOUT}', true), '') = '' THEN
        PERFORM set_config('${SAVED_LOCK_TIMEOUT}', current_setting('lock_timeout'), true);
      END IF;
      PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
      -- A snapshot taken before the lock (REPEATABLE READ, SERIALIZABLE: also a server's or role's
      -- default_transaction_isolation, which the store's own check does not see) would miss a
      -- claim of the key committed while this one waited, and grant the key twice.
      IF current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted') THEN
        RAISE EXCEPTION 'the partitioned idempotency table claims at READ COMMITTED, this transaction is %',
          upper(current_setting('transaction_isolation'))
          USING ERRCODE = '0A000', HINT = 'Set default_transaction_isolation to read committed for the '
            'connections of the store''s DataSource, or use the default table.';
      END IF;
      -- One claim of the key at a time, until this transaction ends.
      PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 7236150000));
      now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
      -- Every attached partition: a record extended past its partition's end keeps it attached.
      IF EXISTS (SELECT 1 FROM ${table} WHERE "key" = p_key AND expires_at_ms > now_ms) THEN
        RETURN;
      END IF;
      -- The key's expired rows go; the fencing token is carried forward past them.
      SELECT max(fencing_token) INTO previous_token FROM ${table} WHERE "key" = p_key;
      DELETE FROM ${table} WHERE "key" = p_key;
      -- The DELETE holds every attached partition (ROW EXCLUSIVE): the creation time is read only
      -- now, so the reaper's check of the row's partition either waits for this claim or ended
      -- before this clock (a clock read before a lock wait could put the row in a partition the
      -- reaper has found empty, and drops).
      now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
      RETURN QUERY INSERT INTO ${table} ("key", state, fingerprint, owner_token, fencing_token, created_at_ms,
          lease_expires_at_ms, expires_at_ms, response_status, response_headers, response_body, response_body_omitted)
        VALUES (p_key, 'in_progress', p_fingerprint, p_owner, coalesce(previous_token, 0) + 1, now_ms,
          now_ms + p_lease_ms, now_ms + p_ttl_ms, NULL, NULL, NULL, false)
        RETURNING *;
    END
    $claim$`,
  ];
}

/**
 * Undoes {@link partitionedTableDdl}: the function first (it returns the table's row type, so the
 * table cannot go before it), then the table with every partition and record.
 */
export function dropPartitionedTableDdl(names: PartitionedNames): string[] {
  return [`DROP FUNCTION ${names.claimFunction}`, `DROP TABLE ${names.table}`];
}

/**
 * The statements of the partitioned table: the default table's (every one of them finds the
 * key's row by "key" across the attached partitions), except the claim, which calls the claim
 * function, in and outside a route's transaction and in place of replacing an expired row.
 * The function sets `lock_timeout` to `lockTimeoutMs` for the lock wait and saves the caller's,
 * which `restoreLockTimeout` puts back, as the default `insertInTransaction` does. No plain
 * `insertClaim`: there is no unique index on "key" to answer a conflict.
 */
export function partitionedStatementsFor(names: PartitionedNames, lockTimeoutMs: number): Statements {
  const claim =
    `SELECT ${RECORD_COLUMNS} FROM ${names.claimFunction}($1, $2, $3, CAST($4 AS BIGINT), CAST($5 AS BIGINT), ` +
    `${lockTimeoutMs})`;
  return {
    ...statementsFor('postgres', names.table, lockTimeoutMs),
    insert: claim,
    insertInTransaction: claim,
    insertClaim: '',
    completeInserted: '',
    replaceExpired: claim,
    deleteExpired: '',
  };
}

/** The names, quoted by `driver` and qualified with its schema (the DataSource's `schema`), if it has one. @internal */
export function partitionedNames(driver: { schema?: string; escape(name: string): string }): PartitionedNames {
  const schema = driver.schema ? driver.escape(driver.schema) : undefined;
  const qualify = (name: string) => (schema ? `${schema}.${driver.escape(name)}` : driver.escape(name));
  return {
    table: qualify(IDEMPOTENCY_RECORDS_TABLE),
    claimFunction: qualify(PARTITIONED_CLAIM_FUNCTION),
    schema,
  };
}
