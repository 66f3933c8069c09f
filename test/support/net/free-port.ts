/** Picks spare loopback ports for the servers and processes a test starts. */
import { createServer } from 'node:net';

/** A TCP port of 127.0.0.1 that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => done(port));
    });
  });
}

/** Whether `port` of 127.0.0.1 can be listened on right now. */
function isFree(port: number): Promise<boolean> {
  return new Promise((done) => {
    const server = createServer();
    server.once('error', () => done(false));
    server.listen(port, '127.0.0.1', () => server.close(() => done(true)));
  });
}

/**
 * A spare port whose companion `port + offset` is spare too: a Redis Cluster node listens on its
 * port and on its cluster bus, 10 000 above it, and aborts when the second one is taken.
 */
export async function freePortWithCompanion(offset: number): Promise<number> {
  for (;;) {
    const port = await freePort();
    if (port + offset <= 65_535 && (await isFree(port + offset))) return port;
  }
}
