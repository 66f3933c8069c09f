import { once } from 'node:events';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { sleep } from '../timing.js';

/**
 * A TCP proxy of our own in front of a server on 127.0.0.1, so a test can make that server
 * unreachable, slow or silent for the code under test, or cut one connection at the moment a
 * given command passes (the Redis store sends one script per step, PostgreSQL one message per
 * statement), without touching the server itself.
 */
export interface TcpProxy {
  readonly port: number;
  /** Cuts every open connection and refuses new ones until `restore()`. */
  cut(): Promise<void>;
  /** Keeps connections open but swallows every byte both ways (a silent network) until `restore()`. */
  blackhole(): void;
  /** Accepts and forwards connections again; ends a blackhole, resetting the connections it starved. */
  restore(): void;
  /** Holds every chunk `ms` before forwarding it, both ways, until `delay(0)`. */
  delay(ms: number): void;
  /** Arms a one-shot fault on the next chunk that matches (see {@link ChunkFault}). */
  arm(fault: ChunkFault): ArmedFault;
  close(): Promise<void>;
}

/** What a chunk must contain: bytes, text, a regular expression over its latin1 text, or a test. */
export type ChunkPattern = string | Buffer | RegExp | ((chunk: Buffer) => boolean);

/**
 * A fault aimed at one command. Matching is per chunk as the proxy reads it: fine for the small
 * commands of a test, which a client writes (and loopback delivers) in one piece.
 */
export interface ChunkFault {
  /** The chunk that triggers the fault. */
  match: ChunkPattern;
  /** Which way the chunk travels. @default 'to-server' */
  direction?: 'to-server' | 'to-client';
  /** Fires only on a connection where a chunk matching this passed first (same direction), since arming. */
  after?: ChunkPattern;
  /**
   * - `cut`: the chunk is never forwarded and its connection is destroyed: the server never saw it;
   * - `cut-reply`: the chunk is forwarded, the next chunk back is swallowed and the connection
   *   destroyed: the server acted, the client never learns it;
   * - `hold`: the chunk and everything after it on that connection (both ways) wait for `release()`.
   */
  action: 'cut' | 'cut-reply' | 'hold';
  /** After a cut, refuse new connections until `restore()` (so a client cannot simply resend). @default false */
  refuse?: boolean;
}

export interface ArmedFault {
  /** Resolves when the fault fired. */
  readonly hit: Promise<void>;
  readonly fired: boolean;
  /** Forwards what a `hold` kept back; no-op for other actions. */
  release(): void;
  /** Disarms a fault that has not fired yet. */
  disarm(): void;
}

interface Armed {
  fault: ChunkFault;
  /** Connections on which `after` has passed. */
  primed: WeakSet<Connection>;
  fire(connection: Connection): void;
}

interface Connection {
  client: Socket;
  upstream: Socket;
  /** Set by `hold`: every chunk waits for it. */
  gate?: Promise<void>;
  /** Set by `cut-reply`: the next chunk back is swallowed and the connection destroyed. */
  cutNextReply: boolean;
  /** Bytes were swallowed by a blackhole: the protocol is out of step, so `restore()` ends it. */
  lostBytes: boolean;
  destroy(): void;
}

function matches(pattern: ChunkPattern, chunk: Buffer): boolean {
  if (typeof pattern === 'function') return pattern(chunk);
  if (pattern instanceof RegExp) return pattern.test(chunk.toString('latin1'));
  return chunk.includes(pattern);
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const connections = new Set<Connection>();
  const armed = new Set<Armed>();
  let refusing = false;
  let silent = false;
  let delayMs = 0;

  /** The armed fault this chunk triggers, if any (one-shot: it is removed). */
  const trigger = (connection: Connection, chunk: Buffer, direction: 'to-server' | 'to-client'): Armed | undefined => {
    for (const entry of armed) {
      if ((entry.fault.direction ?? 'to-server') !== direction) continue;
      if (entry.fault.after && !entry.primed.has(connection)) {
        if (matches(entry.fault.after, chunk)) entry.primed.add(connection);
        continue;
      }
      if (!matches(entry.fault.match, chunk)) continue;
      armed.delete(entry);
      return entry;
    }
    return undefined;
  };

  /** Forwards chunks in order, each after the faults and the delay in force when it arrived. */
  const forward = (connection: Connection, from: Socket, to: Socket, direction: 'to-server' | 'to-client') => {
    let queue: Promise<void> = Promise.resolve();
    from.on('data', (chunk: Buffer) => {
      const wait = delayMs;
      queue = queue.then(async () => {
        if (wait > 0) await sleep(wait);
        if (connection.gate) await connection.gate;
        if (to.destroyed) return;
        if (silent) {
          connection.lostBytes = true;
          return;
        }
        if (direction === 'to-client' && connection.cutNextReply) {
          connection.destroy();
          return;
        }
        const entry = trigger(connection, chunk, direction);
        if (entry) {
          entry.fire(connection);
          if (entry.fault.action === 'cut') {
            connection.destroy();
            return;
          }
          if (entry.fault.action === 'hold') await connection.gate;
        }
        if (!to.destroyed) to.write(chunk);
      });
    });
  };

  const server: Server = createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = createConnection({ host: targetHost, port: targetPort });
    const connection: Connection = {
      client,
      upstream,
      cutNextReply: false,
      lostBytes: false,
      destroy() {
        client.destroy();
        upstream.destroy();
        connections.delete(connection);
      },
    };
    connections.add(connection);
    client.on('error', connection.destroy).on('close', connection.destroy);
    upstream.on('error', connection.destroy).on('close', connection.destroy);
    forward(connection, client, upstream, 'to-server');
    forward(connection, upstream, client, 'to-client');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('the proxy has no port');

  const cutAll = () => {
    for (const connection of connections) connection.destroy();
    connections.clear();
  };

  return {
    port: address.port,
    async cut() {
      refusing = true;
      cutAll();
    },
    blackhole() {
      silent = true;
    },
    restore() {
      refusing = false;
      silent = false;
      for (const connection of connections) if (connection.lostBytes) connection.destroy();
    },
    delay(ms: number) {
      delayMs = ms;
    },
    arm(fault: ChunkFault): ArmedFault {
      let fired = false;
      let hit!: () => void;
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const entry: Armed = {
        fault,
        primed: new WeakSet(),
        fire(connection) {
          fired = true;
          if (fault.action === 'hold') connection.gate = gate;
          if (fault.action === 'cut-reply') connection.cutNextReply = true;
          if (fault.action !== 'hold' && fault.refuse) refusing = true;
          hit();
        },
      };
      armed.add(entry);
      return {
        hit: new Promise<void>((resolve) => (hit = resolve)),
        get fired() {
          return fired;
        },
        release: () => release(),
        disarm: () => {
          armed.delete(entry);
          release();
        },
      };
    },
    async close() {
      refusing = true;
      armed.clear();
      cutAll();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
