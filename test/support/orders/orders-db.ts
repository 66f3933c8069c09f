import { queryTestDatabase } from '../servers/postgres.js';

/** Rows of `table` in `schema` that belong to `tenantId` (the suites use one tenant per key). */
export async function countForTenant(schema: string, table: 'orders' | 'payments', tenantId: string): Promise<number> {
  const rows = await queryTestDatabase<{ n: string }>(
    `SELECT count(*) AS n FROM "${schema}".${table} WHERE tenant_id = $1`,
    [tenantId],
  );
  return Number(rows[0].n);
}

/** The ids of the tenant's orders. */
export async function orderIdsOf(schema: string, tenantId: string): Promise<string[]> {
  const rows = await queryTestDatabase<{ id: string }>(`SELECT id FROM "${schema}".orders WHERE tenant_id = $1`, [
    tenantId,
  ]);
  return rows.map((row) => row.id);
}
