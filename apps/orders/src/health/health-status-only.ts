/**
 * What an anonymous caller of `GET /health` sees of Terminus' `info`, `error` and `details`: each
 * backend's `status`, and the status of the parts it reports on (the idempotency tiers), nothing
 * else. Driver errors and latencies (`message`, `error`, `latencyMs`) name hosts, ports and
 * internals: they are for the admin token and the logs. Pure, unit-tested.
 */
export function statusOnly(section: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (section === undefined) return undefined;
  return Object.fromEntries(Object.entries(section).map(([name, health]) => [name, keepStatus(health)]));
}

function keepStatus(health: unknown): unknown {
  if (typeof health !== 'object' || health === null) return {};
  const kept: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(health)) {
    if (field === 'status') kept.status = value;
    else if (typeof value === 'object' && value !== null && 'status' in value) kept[field] = keepStatus(value);
  }
  return kept;
}
