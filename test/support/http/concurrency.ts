import type { HttpResult } from './send.js';

/**
 * The answers to N concurrent requests with one key (docs/contract.md B.9 rule 26): exactly one fresh
 * execution; every other answer is a 409 `idempotency-request-in-progress` with `Retry-After`,
 * or a replay byte-identical to the fresh one. Returns the fresh answer.
 */
export function expectOneFreshTheRestBusyOrReplayed(results: HttpResult[]): HttpResult {
  const fresh = results.filter(
    (r) => r.status >= 200 && r.status < 300 && r.headers.get('idempotent-replayed') === null,
  );
  // Statuses in the failure message: "0 fresh" alone does not say whether they were 409s or 503s.
  expect({ fresh: fresh.length, statuses: results.map((r) => r.status) }).toMatchObject({ fresh: 1 });
  for (const r of results) {
    if (r === fresh[0]) continue;
    if (r.status === 409) {
      expect(r.json().code).toBe('idempotency_request_in_progress');
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    } else {
      expect(r.status).toBe(fresh[0].status);
      expect(r.headers.get('idempotent-replayed')).toBe('true');
      expect(r.body.equals(fresh[0].body)).toBe(true);
    }
  }
  return fresh[0];
}
