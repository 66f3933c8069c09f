import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from '../orders/app-process.js';

/**
 * A TypeScript program under `test/support/apps/<name>/` compiled with tsc (Nest needs decorator metadata,
 * which Jest's transform gives only in-process) into `node_modules/.cache/fixtures/<name>`, so a
 * test can run it as a real process and kill it. It imports `nestjs-idempotency` by its package
 * name, as any user's app does: the library is built into its own libs/idempotency/dist first,
 * and Node resolves the name through the npm workspace. The fixture's compilation is incremental.
 */
const requireHere = createRequire(import.meta.url);
/** The library's own build (the same one the orders app's process build runs). */
const LIBRARY_BUILD = join(REPO_ROOT, 'libs/idempotency/scripts/build.mjs');
const builds = new Map<string, Promise<string>>();

/** Compiles `test/support/apps/<name>/main.ts` (once per test file); resolves with the path of main.js. */
export function buildFixtureOnce(name: string): Promise<string> {
  let build = builds.get(name);
  if (!build) {
    build = compile(name);
    builds.set(name, build);
  }
  return build;
}

async function compile(name: string): Promise<string> {
  const cacheDir = join(REPO_ROOT, 'node_modules/.cache/fixtures', name);
  const distDir = join(cacheDir, 'dist');
  await mkdir(distDir, { recursive: true });
  const tsconfig = join(cacheDir, 'tsconfig.json');
  await writeFile(
    tsconfig,
    JSON.stringify({
      extends: '../../../../tsconfig.json',
      compilerOptions: {
        outDir: './dist',
        sourceMap: false,
        declaration: false,
        types: ['node'],
        incremental: true,
        tsBuildInfoFile: './tsbuildinfo',
        // Against the library's built types in its dist/, not its sources.
        customConditions: [],
      },
      include: [`../../../../test/support/apps/${name}/**/*.ts`],
    }),
  );
  const steps: Array<[string, string[]]> = [
    ['the library build', [LIBRARY_BUILD]],
    [`tsc for fixture ${name}`, [requireHere.resolve('typescript/bin/tsc'), '-p', tsconfig]],
  ];
  for (const [step, args] of steps) {
    try {
      await promisify(execFile)(process.execPath, args, { cwd: REPO_ROOT, timeout: 300_000 });
    } catch (error) {
      const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
      throw new Error(`${step} failed:\n${stdout}\n${stderr}`, { cause: error });
    }
  }
  // Under node_modules Node finds no package scope: say that the output is ESM.
  await writeFile(join(distDir, 'package.json'), '{ "type": "module" }\n');
  // An alias package older versions of this helper left there would shadow the real one.
  await rm(join(distDir, 'node_modules'), { recursive: true, force: true });
  return join(distDir, 'test/support/apps', name, 'main.js');
}

/** A running fixture process. */
export interface FixtureProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  /** Everything it wrote (stdout and stderr). */
  output(): string;
  /** Resolves when it has exited. */
  readonly exited: Promise<void>;
  kill(signal: NodeJS.Signals): void;
}

/**
 * Starts `mainJs` with `env` (on top of PATH and HOME only) and resolves once it wrote `readyLine`;
 * `onLine` sees every line it writes.
 */
export async function startFixtureProcess(
  mainJs: string,
  env: Record<string, string>,
  readyLine: string,
  onLine: (line: string) => void = () => undefined,
  timeoutMs = 30_000,
): Promise<FixtureProcess> {
  const child = spawn(process.execPath, [mainJs], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', NO_COLOR: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let partial = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no "${readyLine}" within ${timeoutMs} ms:\n${output}`)),
      timeoutMs,
    );
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const lines = (partial + chunk.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        onLine(line);
        if (line.includes(readyLine)) {
          clearTimeout(timer);
          resolve();
        }
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`the fixture exited before it was ready:\n${output}`));
    });
  });
  return { child, pid: child.pid!, output: () => output, exited, kill: (signal) => void child.kill(signal) };
}
