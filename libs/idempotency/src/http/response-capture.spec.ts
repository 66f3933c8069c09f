import { createServer, request, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ResponseCapture, type CapturedResponse, type ReplacementResponse } from './response-capture.js';

/** What a client receives from a real HTTP server whose handler is `handle`. */
async function exchange(handle: (res: ServerResponse) => void) {
  const server: Server = createServer((_req, res) => handle(res));
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

/** A handler that writes through a ResponseCapture, and what the client receives. */
function serve(
  write: (res: ServerResponse) => void,
  onEnd: (captured: CapturedResponse) => Promise<ReplacementResponse | void>,
) {
  return exchange((res) => {
    new ResponseCapture(res, 1024, onEnd);
    write(res);
  });
}

/** Status, content type and body a client receives from a server whose handler is `handle`. */
async function answerOf(handle: (res: ServerResponse) => void): Promise<string> {
  const { status, headers, body } = await exchange(handle);
  return `${status} ${headers['content-type']} ${body}`;
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
    const answer = await answerOf((res) => {
      // Four attempts of one request, as an outer retry() makes them: each installs its capture
      // over whatever the previous one left installed; only the last one's writer writes.
      for (const attempt of [1, 2, 3, 4]) {
        new ResponseCapture(res, 1024, async (captured) => {
          seen.push(`${attempt}:${captured.statusCode}:${captured.body?.toString()}`);
        });
      }
      res.statusCode = 503;
      res.setHeader('Content-Type', 'application/json');
      res.end('{"attempt":4}');
    });
    expect({ answer, seen }).toEqual({
      answer: '503 application/json {"attempt":4}',
      seen: ['4:503:{"attempt":4}', '3:503:{"attempt":4}', '2:503:{"attempt":4}', '1:503:{"attempt":4}'],
    });
  });

  it('stacked captures whose writes overflow: the body streams through once, each capture records it as omitted', async () => {
    const seen: string[] = [];
    const answer = await answerOf((res) => {
      for (const attempt of [1, 2]) {
        new ResponseCapture(res, 4, async (captured) => {
          seen.push(`${attempt}:${captured.statusCode}:${captured.bodyOmitted}:${captured.body === undefined}`);
        });
      }
      res.setHeader('Content-Type', 'text/plain');
      res.write('01234');
      res.write('56789');
      res.end('!');
    });
    expect({ answer, seen }).toEqual({
      answer: '200 text/plain 0123456789!',
      seen: ['2:200:true:true', '1:200:true:true'],
    });
  });

  it('a wrapper installed between two captures (compression-style, calling what it wrapped with `this` or the response, one turn later) reaches the first capture', async () => {
    const seen: string[] = [];
    const answer = await answerOf((res) => {
      new ResponseCapture(res, 1024, async (captured) => {
        seen.push(`1:${captured.statusCode}:${captured.body?.toString()}`);
      });
      const write = res.write as (this: ServerResponse, chunk: unknown) => boolean;
      const end = res.end as (this: ServerResponse) => ServerResponse;
      res.write = function (this: ServerResponse, chunk: unknown) {
        return write.call(this, String(chunk).toUpperCase());
      } as unknown as ServerResponse['write'];
      res.end = function (this: ServerResponse, chunk?: unknown) {
        if (chunk) write.call(this, String(chunk).toUpperCase());
        setImmediate(() => end.call(res));
        return this;
      } as unknown as ServerResponse['end'];
      new ResponseCapture(res, 1024, async (captured) => {
        seen.push(`2:${captured.statusCode}:${captured.body?.toString()}`);
      });
      res.setHeader('Content-Type', 'text/plain');
      res.statusCode = 201;
      res.write('a');
      res.end('b');
    });
    expect({ answer, seen }).toEqual({ answer: '201 text/plain AB', seen: ['2:201:ab', '1:201:AB'] });
  });

  it('captures of two copies of this module (ESM and CommonJS builds loaded together: two symbols) stacked on one response each see the answer once, and it goes out once', async () => {
    const specifier = './response-capture.js?second-copy';
    const copy = (await import(specifier)) as typeof import('./response-capture.js');
    expect(copy.ResponseCapture).not.toBe(ResponseCapture);
    const seen: string[] = [];
    const answer = await answerOf((res) => {
      [ResponseCapture, copy.ResponseCapture, ResponseCapture, copy.ResponseCapture].forEach((Capture, i) => {
        new Capture(res, 1024, async (captured) => {
          seen.push(`${i + 1}:${captured.statusCode}:${captured.body?.toString()}`);
        });
      });
      res.writeHead(202, { 'Content-Type': 'text/plain' });
      res.end('once');
    });
    expect({ answer, seen }).toEqual({
      answer: '202 text/plain once',
      seen: ['4:202:once', '3:202:once', '2:202:once', '1:202:once'],
    });
  });

  it('passes on to its capture only with the response as `this`, as Node.js own methods do', () => {
    const res = { getHeaders: () => ({}), statusCode: 200 } as unknown as ServerResponse;
    new ResponseCapture(res, 1024, async () => undefined);
    const detachedEnd = res.end as (this: unknown) => unknown;
    expect(() => detachedEnd.call(undefined)).toThrow(TypeError);
  });
});
