#!/usr/bin/env node
// `npm run test:package` (and .ci/run): the package as a user gets it.
//   1. `npm pack` in libs/idempotency (its prepack builds dist/), then checks the tarball: no
//      TypeScript sources but declarations, no specs or tests, JS and .d.ts for every entry point,
//      every package that dist/ imports declared, no top-level await anywhere in the graph.
//   2. Brand-new consumer apps in a temp folder (test/package/consumers.mjs: Nest 12 ESM, Nest 12
//      CommonJS, Nest 11 CommonJS, one on ioredis 6) install the tarball with the README's install
//      command, type-check with skipLibCheck: false, start, and answer: first request 201, retry
//      replayed (Idempotent-Replayed: true, same body), other body 422, on the memory store and on
//      Redis (TEST_REDIS_URL, default redis://127.0.0.1:6379, under a key prefix of their own).
// Options: --node <binary> (repeatable) runs the apps and the require() check with those Node.js
// binaries instead of this one (test/package/compat.mjs uses it); --keep keeps the temp folder.
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { builtinModules, createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { CONSUMER_MAIN_TS, CONSUMER_TSCONFIG, CONSUMERS, consumerPackageJson } from './consumers.mjs';

const run = promisify(execFile);
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const libraryDir = join(repoRoot, 'libs/idempotency');
const requireFromRepo = createRequire(join(repoRoot, 'package.json'));
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const npmCli = process.env.npm_execpath?.endsWith('.js') ? [process.execPath, process.env.npm_execpath] : ['npm'];

const args = process.argv.slice(2);
const nodes = args.flatMap((arg, i) => (args[i - 1] === '--node' ? [resolve(arg)] : []));
const runtimes = nodes.length > 0 ? nodes : [process.execPath];
const keep = args.includes('--keep');

const started = Date.now();
const seconds = (since) => `${((Date.now() - since) / 1000).toFixed(1)}s`;
const log = (message) => console.log(`[package] ${message}`);
let failures = 0;
let passes = 0;
function check(ok, what, detail = '') {
  if (ok) passes += 1;
  else failures += 1;
  console.log(`[package] ${ok ? 'ok  ' : 'FAIL'} ${what}${!ok && detail ? `\n${detail}` : ''}`);
  return ok;
}

async function npm(cwd, npmArgs, options = {}) {
  const [command, ...prefix] = npmCli;
  return run(command, [...prefix, ...npmArgs], { cwd, maxBuffer: 64 * 1024 * 1024, timeout: 600_000, ...options });
}

async function filesUnder(dir) {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath ?? entry.path, entry.name)));
}

// --- 1. Pack and inspect ------------------------------------------------------------------------
const work = await mkdtemp(join(tmpdir(), 'idempotency-package-'));
log(`work folder ${work}`);
let t = Date.now();
const { stdout: packJson } = await npm(libraryDir, ['pack', '--json', '--pack-destination', work]);
const packed = JSON.parse(packJson)[0];
const tarball = join(work, packed.filename);
log(`npm pack: ${packed.filename}, ${packed.entryCount} files, ${(packed.size / 1024).toFixed(0)} KiB (${seconds(t)})`);
const files = packed.files.map((file) => file.path);
const manifest = JSON.parse(await readFile(join(libraryDir, 'package.json'), 'utf8'));

check(
  files.every((path) => !path.endsWith('.ts') || path.endsWith('.d.ts')),
  'no TypeScript sources in the tarball, only declarations',
  files.filter((path) => path.endsWith('.ts') && !path.endsWith('.d.ts')).join('\n'),
);
check(
  files.every((path) => !/\.spec\.|(^|\/)(test|src)\//.test(path)),
  'no specs, tests or src/ in the tarball',
  files.filter((path) => /\.spec\.|(^|\/)(test|src)\//.test(path)).join('\n'),
);
for (const required of ['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md']) {
  check(files.includes(required), `${required} is in the tarball`);
}
const entryPoints = Object.entries(manifest.exports).filter(([subpath]) => subpath !== './package.json');
for (const [subpath, conditions] of entryPoints) {
  const wanted = [conditions.types, conditions.default].map((path) => path.replace(/^\.\//, ''));
  check(
    wanted.every((path) => files.includes(path)) && wanted[0].endsWith('.d.ts'),
    `entry point ${subpath}: ${wanted.join(' and ')} are packed`,
    `missing: ${wanted.filter((path) => !files.includes(path)).join(', ')}`,
  );
}

await run('tar', ['-xzf', tarball, '-C', work]);
const unpacked = join(work, 'package');
const distFiles = (await filesUnder(join(unpacked, 'dist'))).filter(
  (path) => path.endsWith('.js') || path.endsWith('.d.ts'),
);

// Every package dist/ imports (code and declarations) is a dependency or a peer. TypeScript's
// pre-processor lists static imports, literal dynamic imports and require() calls, never the
// specifiers in comments; the optional peer loaded by name (importOptional) is read separately.
const ts = requireFromRepo('typescript');
const declared = new Set([
  manifest.name,
  ...Object.keys(manifest.dependencies ?? {}),
  ...Object.keys(manifest.peerDependencies ?? {}),
]);
const builtins = new Set(builtinModules);
const imported = new Map();
for (const path of distFiles) {
  const source = await readFile(join(unpacked, 'dist', path), 'utf8');
  const specifiers = [
    ...ts.preProcessFile(source, true, true).importedFiles.map((file) => file.fileName),
    ...[...source.matchAll(/\bimportOptional(?:<[^>]*>)?\(\s*['"]([^'"]+)['"]/g)].map((match) => match[1]),
  ];
  for (const specifier of specifiers) {
    if (specifier.startsWith('.') || specifier.startsWith('node:') || builtins.has(specifier)) continue;
    const name = specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0];
    if (!imported.has(name)) imported.set(name, path);
  }
}
const undeclared = [...imported].filter(([name]) => !declared.has(name));
check(
  undeclared.length === 0,
  `every package dist/ imports is declared (${[...imported.keys()]
    .filter((name) => name !== manifest.name)
    .sort()
    .join(', ')})`,
  undeclared.map(([name, path]) => `${name} (dist/${path})`).join('\n'),
);
const unused = Object.keys(manifest.dependencies ?? {}).filter((name) => !imported.has(name));
check(
  unused.length === 0,
  `every dependency is imported by dist/ (${Object.keys(manifest.dependencies ?? {}).join(', ')})`,
  unused.join('\n'),
);

// No top-level await in any module: require(esm) refuses such a graph (ERR_REQUIRE_ASYNC_MODULE).
const topLevelAwaits = [];
for (const path of distFiles.filter((file) => file.endsWith('.js'))) {
  const source = ts.createSourceFile(
    path,
    await readFile(join(unpacked, 'dist', path), 'utf8'),
    ts.ScriptTarget.Latest,
    true,
    ts.ScriptKind.JS,
  );
  const visit = (node) => {
    if (ts.isFunctionLike(node) || ts.isClassStaticBlockDeclaration(node)) return;
    const awaits = ts.isAwaitExpression(node) || (ts.isForOfStatement(node) && node.awaitModifier);
    if (awaits) topLevelAwaits.push(`dist/${path}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}`);
    ts.forEachChild(node, visit);
  };
  visit(source);
}
check(
  topLevelAwaits.length === 0,
  `no top-level await in the ${distFiles.filter((f) => f.endsWith('.js')).length} modules of dist/`,
  topLevelAwaits.join('\n'),
);

// And the proof by use: CommonJS require() of every entry point, with every optional peer
// present (the repository's node_modules resolve the workspace package to this same dist/).
for (const node of runtimes) {
  const version = (await run(node, ['--version'])).stdout.trim();
  const program = `for (const e of ${JSON.stringify(entryPoints.map(([subpath]) => subpath.replace(/^\./, '')))}) require('nestjs-idempotency' + e);`;
  const loaded = await run(node, ['--input-type=commonjs', '-e', program], { cwd: repoRoot }).then(
    () => '',
    (error) => error.stderr || String(error),
  );
  check(loaded === '', `Node ${version}: require() loads every entry point (${entryPoints.length})`, loaded);
}

// --- 2. Consumers -------------------------------------------------------------------------------
// The README's example (its first TypeScript block) is type-checked too, in the ESM apps (it ends
// with a top-level await, as an ESM main.ts may).
const readme = await readFile(join(repoRoot, 'README.md'), 'utf8');
const readmeExample = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
check(readmeExample !== undefined, 'the README has a TypeScript example');
t = Date.now();
await Promise.all(
  CONSUMERS.map(async (consumer) => {
    const dir = join(work, consumer.name);
    await mkdir(join(dir, 'src'), { recursive: true });
    await writeFile(join(dir, 'package.json'), `${JSON.stringify(consumerPackageJson(consumer), null, 2)}\n`);
    await writeFile(join(dir, 'tsconfig.json'), `${JSON.stringify(CONSUMER_TSCONFIG, null, 2)}\n`);
    await writeFile(join(dir, 'src/main.ts'), CONSUMER_MAIN_TS);
    if (consumer.moduleType === 'module') await writeFile(join(dir, 'src/readme-example.ts'), readmeExample ?? '');
    // The README's command, the tarball standing for the package name. One shared npm cache.
    const install = consumer.install.map((spec) => (spec === 'nestjs-idempotency' ? tarball : spec));
    const installing = Date.now();
    const result = await npm(dir, ['install', ...install, '--no-audit', '--no-fund', '--prefer-offline']).then(
      () => '',
      (error) => `${error.stdout}\n${error.stderr}`,
    );
    check(
      result === '',
      `${consumer.name}: npm install ${consumer.install.join(' ')} (${seconds(installing)})`,
      result,
    );
  }),
);
log(`installs took ${seconds(t)}`);

t = Date.now();
await Promise.all(
  CONSUMERS.map(async (consumer) => {
    const dir = join(work, consumer.name);
    const tsc = join(dir, 'node_modules/typescript/bin/tsc');
    const compiled = await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: dir }).then(
      () => '',
      (error) => `${error.stdout}${error.stderr}`,
    );
    const nest = JSON.parse(await readFile(join(dir, 'node_modules/@nestjs/core/package.json'), 'utf8')).version;
    const ioredis = JSON.parse(await readFile(join(dir, 'node_modules/ioredis/package.json'), 'utf8')).version;
    const what = consumer.moduleType === 'module' ? 'the app and the README example' : 'the app';
    check(
      compiled === '',
      `${consumer.name} (${consumer.moduleType}, @nestjs/core ${nest}, ioredis ${ioredis}): tsc with skipLibCheck: false, ${what}`,
      compiled,
    );
  }),
);
log(`type checks took ${seconds(t)}`);

/** Starts a consumer and resolves with its URL and a stop function. */
async function start(node, dir, env) {
  const child = spawn(node, ['dist/main.js'], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const url = await new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`no "listening on" within 60 s:\n${output}`)), 60_000);
    const onData = (chunk) => {
      output += chunk;
      const match = /listening on (http:\/\/\S+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        done(match[1].replace('[::1]', '127.0.0.1'));
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      fail(new Error(`exited with code ${code} before listening:\n${output}`));
    });
  });
  const stop = () =>
    new Promise((done) => {
      child.once('exit', () => done(output));
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
    });
  return { url, stop };
}

const post = (url, key, body) =>
  fetch(`${url}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });

t = Date.now();
const { Redis } = requireFromRepo('ioredis');
const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
await redis.connect().catch((error) => {
  throw new Error(`Redis not reachable at ${REDIS_URL} (start it, see README "Running the tests"): ${error.message}`);
});
const prefixes = [];
for (const node of runtimes) {
  const version = (await run(node, ['--version'])).stdout.trim();
  for (const consumer of CONSUMERS) {
    for (const storeName of ['memory', 'redis']) {
      const prefix = `pkg-${consumer.name}-${randomBytes(4).toString('hex')}`;
      if (storeName === 'redis') prefixes.push(prefix);
      const env = storeName === 'redis' ? { REDIS_URL, REDIS_PREFIX: prefix } : {};
      const what = `Node ${version}, ${consumer.name}, ${storeName} store`;
      let app;
      try {
        app = await start(node, join(work, consumer.name), env);
        const key = randomBytes(16).toString('hex');
        const first = await post(app.url, key, { sku: 'book', quantity: 1 });
        const firstBody = await first.text();
        const retry = await post(app.url, key, { sku: 'book', quantity: 1 });
        const retryBody = await retry.text();
        const other = await post(app.url, key, { sku: 'book', quantity: 2 });
        const otherBody = await other.json();
        const seen = {
          first: first.status,
          retry: retry.status,
          replayed: retry.headers.get('idempotent-replayed'),
          sameBody: retryBody === firstBody,
          other: other.status,
          otherCode: otherBody.code,
        };
        const wanted = {
          first: 201,
          retry: 201,
          replayed: 'true',
          sameBody: true,
          other: 422,
          otherCode: 'idempotency_key_reused',
        };
        check(
          JSON.stringify(seen) === JSON.stringify(wanted),
          `${what}: 201, replayed 201, other body 422`,
          `got ${JSON.stringify(seen)}`,
        );
      } catch (error) {
        check(false, what, String(error));
      } finally {
        await app?.stop();
      }
    }
  }
}
for (const prefix of prefixes) {
  const keys = [];
  for (let cursor = '0'; ;) {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
    if (cursor === '0') break;
  }
  if (keys.length > 0) await redis.del(...keys);
}
redis.disconnect();
log(`apps took ${seconds(t)}`);

if (keep) log(`kept ${work}`);
else await rm(work, { recursive: true, force: true });
log(`total ${seconds(started)}`);
console.log(`${passes} passed, ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
