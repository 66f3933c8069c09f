// Processes the pack-and-consume check starts: the consumer apps, and a Redis of its own for the
// README's example (which uses the default key prefix, so it must not write into a shared Redis).
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';

/** A free TCP port on 127.0.0.1. */
export function freePort() {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => done(port));
    });
  });
}

/**
 * Starts `node script` in `dir` and resolves once `ready(output)` returns a value (read from its
 * output, or polled), with that value, the output so far and a stop function.
 */
export async function startProcess(node, script, { cwd, env = {}, ready, what }) {
  const child = spawn(node, [script], {
    cwd,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise((done) => child.once('exit', (code) => done(code)));
  const deadline = Date.now() + 60_000;
  let value;
  for (;;) {
    value = await ready(output);
    if (value !== undefined) break;
    const code = await Promise.race([exited, new Promise((done) => setTimeout(() => done('running'), 200))]);
    if (code !== 'running') throw new Error(`${what} exited with code ${code} before it was ready:\n${output}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${what} was not ready within 60 s:\n${output}`);
    }
  }
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
      await exited;
    }
    return output;
  };
  return { value, output: () => output, stop };
}

/** Starts an app that prints `listening on <url>`; resolves with its URL and a stop function. */
export async function startApp(node, dir, env = {}, script = 'dist/main.js') {
  const app = await startProcess(node, script, {
    cwd: dir,
    env,
    what: script,
    ready: (output) => /listening on (http:\/\/\S+)/.exec(output)?.[1].replace('[::1]', '127.0.0.1'),
  });
  return { url: app.value, output: app.output, stop: app.stop };
}

/** A redis-server of our own on a free port (nothing saved); resolves with its URL and a stop function. */
export async function startPrivateRedis() {
  const port = await freePort();
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  await new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`redis-server did not start:\n${output}`)), 30_000);
    child.stdout.on('data', (chunk) => {
      output += chunk;
      if (/Ready to accept connections/.test(output)) {
        clearTimeout(timer);
        done();
      }
    });
    child.once('error', (error) =>
      fail(new Error(`redis-server could not start (is Redis installed?): ${error.message}`)),
    );
  });
  return {
    url: `redis://127.0.0.1:${port}`,
    stop: () =>
      new Promise((done) => {
        child.once('exit', done);
        child.kill('SIGTERM');
      }),
  };
}

/** Resolves with true once `url` answers an HTTP request at all. */
export async function answers(url) {
  return fetch(url, { method: 'HEAD' }).then(
    () => true,
    () => undefined,
  );
}
