import { request as httpRequest } from 'node:http';
import type { HttpResult } from '../../support/http/send.js';

/** A request whose client can leave (destroy its socket) at a moment the test picks. */
export interface LeavableRequest {
  /** The answer, or `'left'` when the client left (or the connection broke) before it was read. */
  answer: Promise<HttpResult | 'left'>;
  /** Destroys the socket: the client is gone, whatever the server does next. */
  leave(): void;
}

/**
 * Sends `POST path` with a JSON body over a connection of its own (no agent: nothing pooled
 * that could outlive a `leave()`), and reads the answer unless the client leaves first.
 */
export function sendLeavable(
  baseUrl: string,
  path: string,
  body: unknown,
  headers: Record<string, string>,
): LeavableRequest {
  const payload = JSON.stringify(body);
  const { hostname, port } = new URL(baseUrl);
  const req = httpRequest({
    host: hostname,
    port,
    path,
    method: 'POST',
    agent: false,
    headers: { ...headers, 'Content-Type': 'application/json', 'Content-Length': String(Buffer.byteLength(payload)) },
  });
  const answer = new Promise<HttpResult | 'left'>((resolve) => {
    req.once('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.once('error', () => resolve('left'));
      res.once('aborted', () => resolve('left'));
      res.once('end', () => {
        const headers = new Headers();
        for (const [name, value] of Object.entries(res.headers)) {
          if (Array.isArray(value)) value.forEach((item) => headers.append(name, item));
          else if (value !== undefined) headers.set(name, value);
        }
        const bytes = Buffer.concat(chunks);
        const text = bytes.toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers, body: bytes, text, json: () => JSON.parse(text) });
      });
    });
    req.once('error', () => resolve('left'));
    req.once('close', () => resolve('left'));
  });
  req.end(payload);
  return { answer, leave: () => req.destroy() };
}
