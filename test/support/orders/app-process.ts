import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/**
 * The orders service as a real process: built once per test run (the library into its own
 * libs/idempotency/dist, since the app imports it by its package name as any user's app does;
 * then the app with the Nest CLI into `node_modules/.cache/orders-e2e/dist`, so it never touches
 * `dist/`), started with `node .../main.js`, stopped with SIGTERM.
 */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const CACHE_DIR = join(REPO_ROOT, 'node_modules/.cache/orders-e2e');
const MAIN_JS = join(CACHE_DIR, 'dist/apps/orders/src/main.js');
const WORKER_JS = join(CACHE_DIR, 'dist/apps/orders/src/worker.js');

const BUILD_STAMP = join(CACHE_DIR, 'build-stamp');
/** What the build reads besides node_modules. */
const BUILD_INPUTS = [
  'apps/orders/src',
  'libs/idempotency/src',
  'libs/idempotency/package.json',
  'libs/idempotency/tsconfig.build.json',
  'tsconfig.json',
  'apps/orders/tsconfig.app.json',
  'nest-cli.json',
];
/** The library's own build: the app imports `nestjs-idempotency`, which Node resolves to its dist/. */
const LIBRARY_BUILD = join(REPO_ROOT, 'libs/idempotency/scripts/build.mjs');

let build: Promise<string> | undefined;

/**
 * A digest of the build's inputs (paths, sizes, modification times): equal digests, same build.
 * Lets every suite of a run (each has its own module registry) reuse one build.
 */
async function sourceDigest(): Promise<string> {
  const hash = createHash('sha256');
  const visit = async (path: string): Promise<void> => {
    const info = await stat(join(REPO_ROOT, path));
    if (!info.isDirectory()) {
      hash.update(`${path}\0${info.size}\0${info.mtimeMs}\n`);
      return;
    }
    for (const entry of (await readdir(join(REPO_ROOT, path))).sort()) await visit(join(path, entry));
  };
  for (const input of BUILD_INPUTS) await visit(input);
  return hash.digest('hex');
}

/**
 * Builds the app (about 5 s on an idle machine) unless the last build was made from the same
 * sources; once per test file at most. Returns main.js.
 */
export function buildOrdersAppOnce(): Promise<string> {
  build ??= (async () => {
    const digest = await sourceDigest();
    const previous = await readFile(BUILD_STAMP, 'utf8').catch(() => '');
    if (previous === digest && (await stat(MAIN_JS).catch(() => undefined))) return MAIN_JS;
    await rm(BUILD_STAMP, { force: true });
    await mkdir(CACHE_DIR, { recursive: true });
    const tsconfig = join(CACHE_DIR, 'tsconfig.json');
    // Only the app's sources (and what they import), never the specs.
    await writeFile(
      tsconfig,
      JSON.stringify({
        extends: '../../../apps/orders/tsconfig.app.json',
        compilerOptions: { outDir: './dist', sourceMap: false },
        include: ['../../../apps/orders/src/**/*.ts'],
        exclude: ['../../../**/*.spec.ts'],
      }),
    );
    // The CLI resolves -p against the working directory, even when it is absolute.
    const nest = join(REPO_ROOT, 'node_modules/@nestjs/cli/bin/nest.js');
    const steps: Array<[string, string[]]> = [
      ['the library build', [LIBRARY_BUILD]],
      ['nest build', [nest, 'build', 'orders', '-p', relative(REPO_ROOT, tsconfig)]],
    ];
    for (const [name, args] of steps) {
      try {
        await promisify(execFile)(process.execPath, args, { cwd: REPO_ROOT, timeout: 180_000 });
      } catch (error) {
        const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
        throw new Error(`${name} failed:\n${stdout}\n${stderr}`, { cause: error });
      }
    }
    await writeFile(BUILD_STAMP, digest);
    return MAIN_JS;
  })();
  return build;
}

export interface OrdersProcess {
  /** `http://127.0.0.1:<port>` */
  url: string;
  child: ChildProcess;
  /** Everything the process wrote so far (stdout and stderr). */
  output(): string;
  /** SIGTERM, then waits for the exit (SIGKILL after 10 s); resolves with the exit code. */
  stop(): Promise<number | null>;
}

export interface StartOptions {
  /** Environment of the service (on top of PATH and HOME only: the test's own env is not passed). */
  env?: Record<string, string>;
  cwd?: string;
  /** How long to wait for "listening on". @default 30_000 */
  timeoutMs?: number;
}

/** Starts the built service on a free port of 127.0.0.1 and resolves once it listens. */
export async function startOrdersProcess(options: StartOptions = {}): Promise<OrdersProcess> {
  const child = spawnOrders({ PORT: '0', HOST: '127.0.0.1', ...options.env }, options.cwd);
  let output = '';
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  const port = await new Promise<number>((done, fail) => {
    const timer = setTimeout(
      () => fail(new Error(`no "listening on" within ${options.timeoutMs ?? 30_000} ms:\n${output}`)),
      options.timeoutMs ?? 30_000,
    );
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /listening on http:\/\/[^\s:]+:(\d+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        done(Number(match[1]));
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      fail(new Error(`the service exited with code ${code} before listening:\n${output}`));
    });
  });
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    output: () => output,
    stop: () => stopProcess(child, exited),
  };
}

/** A worker process (`worker.js`) of the built service. */
export interface OrdersWorkerProcess {
  child: ChildProcess;
  output(): string;
  /** SIGTERM, then waits for the exit (SIGKILL after 10 s); resolves with the exit code. */
  stop(): Promise<number | null>;
}

/** Starts the built worker (`apps/orders/src/worker.ts`) and resolves once it says it is ready. */
export async function startOrdersWorkerProcess(options: StartOptions = {}): Promise<OrdersWorkerProcess> {
  const child = spawnOrders({ ...options.env }, options.cwd, WORKER_JS);
  let output = '';
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  await new Promise<void>((done, fail) => {
    const timeoutMs = options.timeoutMs ?? 30_000;
    const timer = setTimeout(
      () => fail(new Error(`no "Orders worker ready" within ${timeoutMs} ms:\n${output}`)),
      timeoutMs,
    );
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('Orders worker ready')) {
        clearTimeout(timer);
        done();
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      fail(new Error(`the worker exited with code ${code} before it was ready:\n${output}`));
    });
  });
  return {
    child,
    output: () => output,
    stop: () => stopProcess(child, exited),
  };
}

/** Runs the built service until it exits by itself (bad configuration); resolves with code and output. */
export async function runOrdersProcessToExit(
  env: Record<string, string>,
  cwd?: string,
): Promise<{ code: number | null; output: string }> {
  const child = spawnOrders(env, cwd);
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const code = await new Promise<number | null>((done) => child.once('exit', (c) => done(c)));
  clearTimeout(killer);
  return { code, output };
}

function spawnOrders(env: Record<string, string>, cwd?: string, script: string = MAIN_JS): ChildProcess {
  return spawn(process.execPath, [script], {
    cwd: cwd ?? REPO_ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', NO_COLOR: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** SIGTERM, then waits for `exited` (SIGKILL after 10 s); resolves with the exit code. */
async function stopProcess(child: ChildProcess, exited: Promise<number | null>): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  child.kill('SIGTERM');
  const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  const code = await exited;
  clearTimeout(killer);
  return code;
}
