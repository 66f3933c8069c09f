import { replayableHeaders } from './replayable-headers.js';

describe('replayableHeaders (docs/contract.md B.8)', () => {
  const own = new Set(['idempotency-key', 'idempotent-replayed']);

  it('rule 21 (our addition): drops the CORS response headers, which the CORS layer computes for each request', () => {
    const kept = replayableHeaders(
      {
        'Access-Control-Allow-Origin': 'https://a.example',
        'Access-Control-Allow-Credentials': 'true',
        'Access-Control-Expose-Headers': 'Location',
        Vary: 'Origin',
        Location: '/orders/1',
      },
      own,
    );
    expect(kept).toEqual({ vary: 'Origin', location: '/orders/1' });
  });

  it('rule 21: drops hop-by-hop headers, Date, Content-Length, Set-Cookie and telemetry', () => {
    const kept = replayableHeaders(
      {
        Connection: 'keep-alive',
        'Keep-Alive': 'timeout=5',
        'Proxy-Connection': 'close',
        TE: 'trailers',
        Trailer: 'x',
        'Transfer-Encoding': 'chunked',
        Upgrade: 'h2c',
        Date: 'Mon, 01 Jan 2024 00:00:00 GMT',
        'Content-Length': 12,
        'Set-Cookie': ['a=1', 'b=2'],
        'X-Request-Id': 'r1',
        'Request-Id': 'r2',
        traceparent: '00-abc',
        tracestate: 'x=y',
        'Server-Timing': 'db;dur=1',
        'RateLimit-Remaining': '9',
        RateLimit: 'limit=10',
        'X-RateLimit-Limit': '10',
        'Idempotency-Key': 'k',
        'Idempotent-Replayed': 'false',
      },
      own,
    );
    expect(kept).toEqual({});
  });

  it('rule 22: keeps Location, Content-Location, Content-Type, ETag, Cache-Control, Vary and custom headers', () => {
    const kept = replayableHeaders(
      {
        Location: '/orders/1',
        'Content-Location': '/orders/1',
        'Content-Type': 'application/json; charset=utf-8',
        'Content-Disposition': 'inline',
        ETag: 'W/"1"',
        'Last-Modified': 'x',
        'Cache-Control': 'private',
        Vary: 'Accept',
        'X-Order-Seq': 42,
        'X-Multi': ['a', 'b'],
        'X-Undefined': undefined,
      },
      own,
    );
    expect(kept).toEqual({
      location: '/orders/1',
      'content-location': '/orders/1',
      'content-type': 'application/json; charset=utf-8',
      'content-disposition': 'inline',
      etag: 'W/"1"',
      'last-modified': 'x',
      'cache-control': 'private',
      vary: 'Accept',
      'x-order-seq': '42',
      'x-multi': ['a', 'b'],
    });
  });
});
