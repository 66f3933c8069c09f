import { createServer, request, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ResponseCapture, type CapturedResponse, type ReplacementResponse } from './response-capture.js';

/** A real HTTP server whose handler writes through a ResponseCapture, and a client reading it. */
async function serve(
  write: (res: ServerResponse) => void,
  onEnd: (captured: CapturedResponse) => Promise<ReplacementResponse | void>,
) {
  const server: Server = createServer((_req, res) => {
    new ResponseCapture(res, 1024, onEnd);
    write(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  try {
    return await new Promise<{ status: number; headers: IncomingHttpHeaders; body: string }>((resolve, reject) => {
      request({ port, host: '127.0.0.1', path: '/' }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString() }),
        );
      })
        .on('error', reject)
        .end();
    });
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
}

const replacement: ReplacementResponse = {
  statusCode: 503,
  headers: { 'content-type': 'application/problem+json', 'retry-after': '1' },
  body: Buffer.from('{"title":"replaced"}'),
};

describe('ResponseCapture', () => {
  it('captures status, headers passed to writeHead and body, and sends them unchanged', async () => {
    let captured: CapturedResponse | undefined;
    const res = await serve(
      (raw) => {
        raw.setHeader('X-Set', 'a');
        raw.writeHead(201, { 'Content-Type': 'application/json', Location: '/orders/1' });
        raw.end('{"id":1}');
      },
      async (c) => {
        captured = c;
      },
    );
    expect(captured).toMatchObject({
      statusCode: 201,
      bodyOmitted: false,
      headers: { 'x-set': 'a', 'content-type': 'application/json', location: '/orders/1' },
    });
    expect(captured!.body!.toString()).toBe('{"id":1}');
    expect(res).toMatchObject({ status: 201, body: '{"id":1}', headers: { location: '/orders/1', 'x-set': 'a' } });
  });

  it.each([
    [
      'set on the response (Express)',
      (raw: ServerResponse) => {
        raw.setHeader('Access-Control-Allow-Origin', '*');
        raw.setHeader('Content-Type', 'application/json');
        raw.setHeader('Location', '/orders/1');
        raw.statusCode = 201;
        raw.end('{"id":1}');
      },
    ],
    [
      'handed to writeHead (Fastify)',
      (raw: ServerResponse) => {
        raw.writeHead(201, {
          'Access-Control-Allow-Origin': '*',
          'Content-Type': 'application/json',
          Location: '/orders/1',
        });
        raw.end('{"id":1}');
      },
    ],
  ])('a replacement keeps cross-cutting headers %s and drops the representation it replaces', async (_how, write) => {
    const res = await serve(write, async () => replacement);
    expect(res.status).toBe(503);
    expect(res.body).toBe('{"title":"replaced"}');
    expect(res.headers['access-control-allow-origin']).toBe('*');
    expect(res.headers['content-type']).toBe('application/problem+json');
    expect(res.headers['retry-after']).toBe('1');
    expect(res.headers.location).toBeUndefined();
    expect(res.headers['content-length']).toBe(String(replacement.body.length));
  });

  it('captures stacked on one response (an outer retry() claiming again) each see the answer once, innermost first, and it goes out once', async () => {
    const seen: string[] = [];
    const server: Server = createServer((_req, res) => {
      // Four attempts of one request, as an outer retry() makes them: each installs its capture
      // over whatever the previous one left installed; only the last one's writer writes.
      for (const attempt of [1, 2, 3, 4]) {
        new ResponseCapture(res, 1024, async (captured) => {
          seen.push(`${attempt}:${captured.statusCode}:${captured.body?.toString()}`);
        });
      }
      res.statusCode = 503;
      res.end('{"attempt":4}');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      const body = await new Promise<string>((resolve, reject) => {
        request({ port, host: '127.0.0.1', path: '/' }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () => resolve(`${res.statusCode} ${Buffer.concat(chunks).toString()}`));
        })
          .on('error', reject)
          .end();
      });
      expect({ body, seen }).toEqual({
        body: '503 {"attempt":4}',
        seen: ['4:503:{"attempt":4}', '3:503:{"attempt":4}', '2:503:{"attempt":4}', '1:503:{"attempt":4}'],
      });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('passes on to its capture only with the response as `this`, as Node.js own methods do', () => {
    const res = { getHeaders: () => ({}), statusCode: 200 } as unknown as ServerResponse;
    new ResponseCapture(res, 1024, async () => undefined);
    const detachedEnd = res.end as (this: unknown) => unknown;
    expect(() => detachedEnd.call(undefined)).toThrow(TypeError);
  });
});
