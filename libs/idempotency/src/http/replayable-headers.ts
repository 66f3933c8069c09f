/**
 * Response headers that are never stored nor replayed (docs/contract.md B.8 rule 21): hop-by-hop
 * headers, `Date` and `Content-Length` (regenerated), `Set-Cookie` (security state), and
 * per-request telemetry. The library's own headers are removed by the caller, which knows
 * the configured names. CORS response headers (`Access-Control-*`) are per request too: the
 * CORS layer computes them for each request's `Origin`, and a stored
 * `Access-Control-Allow-Origin` replayed to another origin would make the browser refuse the
 * answer (our addition to the rule 21 list).
 */
const DENIED = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'date',
  'content-length',
  'set-cookie',
  'x-request-id',
  'request-id',
  'traceparent',
  'tracestate',
  'server-timing',
]);

function isDenied(name: string, own: ReadonlySet<string>): boolean {
  return (
    DENIED.has(name) ||
    own.has(name) ||
    name.startsWith('ratelimit') ||
    name.startsWith('x-ratelimit-') ||
    name.startsWith('access-control-')
  );
}

/**
 * The replayable subset of `headers`, names lower-cased, values as strings (numbers become
 * strings, arrays stay arrays). `ownHeaders` are lower-cased names the library adds itself.
 */
export function replayableHeaders(
  headers: Record<string, number | string | readonly string[] | undefined>,
  ownHeaders: ReadonlySet<string>,
): Record<string, string | string[]> {
  const kept: Record<string, string | string[]> = {};
  for (const [rawName, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    const name = rawName.toLowerCase();
    if (isDenied(name, ownHeaders)) continue;
    kept[name] = Array.isArray(value) ? value.map(String) : String(value);
  }
  return kept;
}
