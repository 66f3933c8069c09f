import { once } from 'node:events';
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';

/**
 * A bare `node:http` server that answers each request as a test scripts it, and records what
 * it received: for testing a client's retry rules against a real socket.
 */
export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** How to answer one request. */
export type ScriptedAnswer =
  | { status: number; headers?: Record<string, string>; body?: unknown }
  /** Reads the request, then destroys the socket: the client gets no response. */
  | 'drop'
  /** Reads the request and never answers (until the server closes). */
  | 'hang';

export interface ScriptedServer {
  readonly url: string;
  readonly received: ReceivedRequest[];
  /** Answers the next requests in order; past the end of the script, the last answer repeats. */
  script(...answers: ScriptedAnswer[]): void;
  /** Resolves once `n` requests were received in all. */
  receivedCount(n: number): Promise<void>;
  close(): Promise<void>;
}

export const problem = (status: number, typeSuffix: string, headers: Record<string, string> = {}): ScriptedAnswer => ({
  status,
  headers: { 'Content-Type': 'application/problem+json', ...headers },
  body: { type: `https://api.example.com/problems/${typeSuffix}`, status, title: typeSuffix },
});

export async function startScriptedServer(): Promise<ScriptedServer> {
  const received: ReceivedRequest[] = [];
  let answers: ScriptedAnswer[] = [{ status: 200, body: { ok: true } }];
  let waiters: Array<{ n: number; done: () => void }> = [];
  const hanging = new Set<ServerResponse>();

  const answer = (request: IncomingMessage, response: ServerResponse, body: string) => {
    received.push({ method: request.method ?? '', url: request.url ?? '', headers: request.headers, body });
    const next = answers[Math.min(received.length - 1, answers.length - 1)];
    waiters = waiters.filter((waiter) => (received.length >= waiter.n ? (waiter.done(), false) : true));
    if (next === 'drop') {
      request.socket.destroy();
      return;
    }
    if (next === 'hang') {
      hanging.add(response);
      return;
    }
    const payload = next.body === undefined ? '' : JSON.stringify(next.body);
    response.writeHead(next.status, {
      ...(payload ? { 'Content-Type': 'application/json' } : {}),
      ...next.headers,
    });
    response.end(payload);
  };

  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => answer(request, response, Buffer.concat(chunks).toString('utf8')));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };

  return {
    url: `http://127.0.0.1:${port}`,
    received,
    script: (...next) => {
      answers = next;
      received.length = 0;
    },
    receivedCount: (n) => (received.length >= n ? Promise.resolve() : new Promise((done) => waiters.push({ n, done }))),
    close: async () => {
      for (const response of hanging) response.destroy();
      server.closeAllConnections();
      await new Promise<void>((done) => server.close(() => done()));
    },
  };
}
