import { once } from 'node:events';
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { isUnread, readUnreadBody, UnreadBodyTooLargeError } from './unread-body.js';

/**
 * Reading a request body before the layers after the interceptor, and putting it back, on real
 * Node requests over a socket: what multer, a handler that pipes the request, or one that
 * iterates it reads afterwards must be the whole body, once.
 */
describe('readUnreadBody', () => {
  let server: Server;
  let port: number;
  let handle: (req: IncomingMessage, res: ServerResponse) => Promise<void>;

  beforeAll(async () => {
    server = createServer((req, res) => {
      handle(req, res).catch((error: Error) => {
        res.statusCode = 500;
        res.end(`${error.name}: ${error.message}`);
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  /** Sends `chunks` one by one (chunked unless `length` is given), with a pause between them. */
  function post(chunks: Buffer[], headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
    return new Promise((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, method: 'POST', path: '/', headers }, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(parts).toString() }));
      });
      req.on('error', reject);
      void (async () => {
        for (const chunk of chunks) {
          req.write(chunk);
          await new Promise((r) => setTimeout(r, 5));
        }
        req.end();
      })();
    });
  }

  const body = Buffer.concat([Buffer.from('--x\r\n'), Buffer.alloc(200_000, 0x61), Buffer.from([0x00, 0xff])]);
  const chunksOf = (data: Buffer, size: number) =>
    Array.from({ length: Math.ceil(data.length / size) }, (_, i) => data.subarray(i * size, (i + 1) * size));

  it('reads a chunked body that arrives in pieces and puts it back for a reader that listens for data', async () => {
    handle = async (req, res) => {
      expect(isUnread(req)).toBe(true);
      const read = await readUnreadBody(req, 1_000_000);
      const piped: Buffer[] = [];
      let ends = 0;
      await new Promise<void>((resolve) => {
        req.on('data', (c: Buffer) => piped.push(c));
        req.on('end', () => {
          ends++;
          resolve();
        });
      });
      res.end(JSON.stringify({ read: read.equals(body), again: Buffer.concat(piped).equals(body), ends }));
    };
    const res = await post(chunksOf(body, 16_384));
    expect(JSON.parse(res.text)).toEqual({ read: true, again: true, ends: 1 });
  });

  it('puts it back for a reader that iterates the request later, with a Content-Length body', async () => {
    handle = async (req, res) => {
      const read = await readUnreadBody(req, 1_000_000);
      await new Promise((r) => setTimeout(r, 20));
      const again: Buffer[] = [];
      for await (const chunk of req) again.push(chunk as Buffer);
      res.end(JSON.stringify({ read: read.length, again: Buffer.concat(again).equals(body) }));
    };
    const res = await post([body], { 'Content-Length': String(body.length) });
    expect(JSON.parse(res.text)).toEqual({ read: body.length, again: true });
  });

  it('reads an empty body as empty, and the request still ends for the next reader', async () => {
    handle = async (req, res) => {
      const read = await readUnreadBody(req, 10);
      const again: Buffer[] = [];
      for await (const chunk of req) again.push(chunk as Buffer);
      res.end(JSON.stringify({ read: read.length, again: Buffer.concat(again).length }));
    };
    const res = await post([], { 'Content-Length': '0' });
    expect(JSON.parse(res.text)).toEqual({ read: 0, again: 0 });
  });

  it('refuses a body above the limit, discards the rest, and the response still goes out', async () => {
    handle = async (req, res) => {
      await expect(readUnreadBody(req, 50_000)).rejects.toThrow(UnreadBodyTooLargeError);
      res.statusCode = 413;
      res.end('too large');
    };
    const res = await post(chunksOf(body, 16_384));
    expect(res).toEqual({ status: 413, text: 'too large' });
  });

  it('a stream something has read from is no longer unread', async () => {
    handle = async (req, res) => {
      const before = isUnread(req);
      req.resume();
      await once(req, 'end');
      res.end(JSON.stringify({ before, after: isUnread(req) }));
    };
    const res = await post([Buffer.from('abc')]);
    expect(JSON.parse(res.text)).toEqual({ before: true, after: false });
  });
});
