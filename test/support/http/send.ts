import { request as httpRequest } from 'node:http';

/** HTTP calls over real sockets for the e2e suites, each answer read to the last byte. */

export interface HttpResult {
  status: number;
  headers: Headers;
  body: Buffer;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as fetch's Response.json(): a test reads the fields it asserts
  json<T = any>(): T;
}

export interface SendOptions {
  method?: string;
  /** `Idempotency-Key` value; omitted when undefined. */
  key?: string;
  /** A JSON-serialisable body, or a string sent as is. */
  body?: unknown;
  contentType?: string;
  headers?: Record<string, string>;
}

/** One HTTP request over a real socket (fetch), body read to the last byte. */
export async function send(baseUrl: string, path: string, options: SendOptions = {}): Promise<HttpResult> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.key !== undefined) headers['Idempotency-Key'] = options.key;
  let body: string | undefined;
  if (options.body !== undefined) {
    body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
    headers['Content-Type'] = options.contentType ?? 'application/json';
  }
  const response = await fetch(`${baseUrl}${path}`, { method: options.method ?? 'POST', headers, body });
  const bytes = Buffer.from(await response.arrayBuffer());
  return toResult(response.status, response.headers, bytes);
}

/**
 * A request whose headers are sent exactly as listed, repeated names included (fetch would
 * merge them): for the "several field lines" rule.
 */
export function sendRawHeaders(
  baseUrl: string,
  path: string,
  rawHeaders: Array<[string, string]>,
  body = '',
): Promise<HttpResult> {
  const url = new URL(path, baseUrl);
  return new Promise((resolve, reject) => {
    // An array value is sent as one field line per element: how repeated names reach the server.
    const headers: Record<string, string | string[]> = { 'Content-Length': String(Buffer.byteLength(body)) };
    for (const [name, value] of rawHeaders) {
      const seen = headers[name];
      headers[name] = seen === undefined ? value : [...(Array.isArray(seen) ? seen : [seen]), value];
    }
    const req = httpRequest(
      { host: url.hostname, port: url.port, path: url.pathname + url.search, method: 'POST', headers },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const headers = new Headers();
          for (const [name, value] of Object.entries(res.headers)) {
            if (Array.isArray(value)) value.forEach((v) => headers.append(name, v));
            else if (value !== undefined) headers.set(name, value);
          }
          resolve(toResult(res.statusCode ?? 0, headers, Buffer.concat(chunks)));
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

function toResult(status: number, headers: Headers, body: Buffer): HttpResult {
  const text = body.toString('utf8');
  return { status, headers, body, text, json: () => JSON.parse(text) };
}
