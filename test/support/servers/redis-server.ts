import { spawn, type ChildProcess } from 'node:child_process';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { freePort } from '../net/free-port.js';
import { sleep } from '../timing.js';
import { openRedis } from './redis.js';

/**
 * Throwaway redis-servers (no persistence) on spare loopback ports, for tests that stop, kill
 * or reconfigure Redis, and one-off commands to such a server.
 */

/** A throwaway redis-server (no persistence) on a spare loopback port. */
export interface ThrowawayRedis {
  readonly port: number;
  readonly url: string;
  /** Shuts the server down (SIGTERM) and waits until the process has exited. */
  stop(): Promise<void>;
  /** Kills the server at once (SIGKILL), as a crash would; does not wait. */
  kill(): void;
}

/** True when something on `port` answers PING with +PONG. */
function answersPing(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.on('error', () => done(false));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString('latin1');
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

async function launch(
  port: number,
  extraArgs: readonly string[],
  dir: string,
  configFile?: string,
): Promise<{ child: ChildProcess; output: () => string }> {
  const child = spawn(
    'redis-server',
    [
      ...(configFile ? [configFile] : []),
      ...[
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        dir,
        ...extraArgs,
      ],
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString()).slice(-4_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<'exited'>((resolve) => child.once('exit', () => resolve('exited')));
  const failed = new Promise<never>((_, reject) =>
    child.once('error', (error) =>
      reject(new Error(`could not start redis-server (${error.message}): is it installed and on PATH?`)),
    ),
  );
  failed.catch(() => undefined);
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    const winner = await Promise.race([answersPing(port).then((ok) => (ok ? 'up' : 'down')), exited, failed]);
    if (winner === 'up') return { child, output: () => output };
    if (winner === 'exited') throw Object.assign(new Error(`redis-server exited: ${output.trim()}`), { exited: true });
    await sleep(25);
  }
  child.kill('SIGKILL');
  throw new Error(`redis-server on port ${port} did not answer within 5 s: ${output.trim()}`);
}

/**
 * Starts `redis-server --port <spare port> --bind 127.0.0.1 --save "" --appendonly no` and waits
 * until it answers PING. Retries on another port when the chosen one was taken in between;
 * `port` asks for a given port (to bring a killed server back); `configFile` goes first on the
 * command line (Sentinel needs one it can rewrite). The caller stops it; a server still running
 * when the test process exits is killed.
 */
export async function startRedisServer(
  options: { port?: number; args?: readonly string[]; dir?: string; configFile?: string } = {},
): Promise<ThrowawayRedis> {
  for (let attempt = 1; ; attempt++) {
    const port = options.port ?? (await freePort());
    try {
      const { child } = await launch(port, options.args ?? [], options.dir ?? tmpdir(), options.configFile);
      const killAtExit = (): void => {
        child.kill('SIGKILL');
      };
      process.once('exit', killAtExit);
      const exited = new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) resolve();
        else child.once('exit', () => resolve());
      });
      void exited.then(() => process.removeListener('exit', killAtExit));
      return {
        port,
        url: `redis://127.0.0.1:${port}`,
        async stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
          await exited;
        },
        kill() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        },
      };
    } catch (error) {
      if (options.port !== undefined || attempt >= 3 || !(error as { exited?: boolean }).exited) throw error;
    }
  }
}

/** The answer of one command to the node on `port` (a short-lived connection). */
export async function askNode(port: number, ...args: (string | number)[]): Promise<unknown> {
  const client = await openRedis(`redis://127.0.0.1:${port}`, { commandTimeout: 10_000 });
  try {
    return await client.call(String(args[0]), ...args.slice(1));
  } finally {
    client.disconnect();
  }
}
