#!/usr/bin/env node
// `npm run test:package` (and .ci/run through `npm run compat`): the package as a user gets it.
//   1. `npm pack` in libs/idempotency (its prepack builds dist/), then inspect-tarball.mjs checks
//      the files, both faces (import, require) of every entry point, the packages dist/ imports,
//      the README, and runs publint and @arethetypeswrong/cli on the tarball.
//   2. On each Node.js of the run: require() and import() of every entry point give the same
//      objects (one copy of the code, docs/packaging.md).
//   3. Brand-new apps in a temp folder install the tarball with the README's install command:
//      - starters.mjs: the Nest 11 starter (TypeScript 5.7, nodenext, Jest), a Nest 11 app on
//        "module": "commonjs" (Jest), the Nest 12 starter (ESM, Vitest): each type-checks with its
//        own tsconfig and runs its own unit and e2e tests; and a CommonJS app that also imports
//        the package from an ES module (same classes, the route replays);
//      - consumers.mjs: Nest 12 apps, ESM and CommonJS, built with skipLibCheck: false, that start
//        and answer (201, replay, 422) on the memory store and on Redis; and the README's example,
//        compiled as ESM and as CommonJS, run against a Redis of our own.
// Options: --node <binary> (repeatable) runs everything of step 2 and 3 that runs with those
// Node.js binaries instead of this one (compat.mjs); --keep keeps the temp folder.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify, stripVTControlCharacters } from 'node:util';
import {
  CONSUMER_MAIN_TS,
  CONSUMER_TSCONFIG,
  CONSUMERS,
  consumerPackageJson,
  README_INSTALLS,
  TYPEORM_CONSUMER_ENTRY_POINTS_TS,
} from './consumers.mjs';
import { inspectTarball } from './inspect-tarball.mjs';
import { answers, freePort, startApp, startPrivateRedis, startProcess } from './processes.mjs';
import { STARTERS } from './starters.mjs';

const run = promisify(execFile);
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const libraryDir = join(repoRoot, 'libs/idempotency');
const requireFromRepo = createRequire(join(repoRoot, 'package.json'));
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const npmCli = process.env.npm_execpath?.endsWith('.js') ? [process.env.npm_execpath] : [];

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
const failureText = (error) => `${error.stdout ?? ''}${error.stderr ?? ''}` || String(error);

/** npm with `node` (this one by default) first on PATH, so scripts and bins run on it too. */
async function npm(cwd, npmArgs, { node = process.execPath, timeout = 600_000 } = {}) {
  const env = {
    ...process.env,
    PATH: `${dirname(node)}${delimiter}${process.env.PATH ?? ''}`,
    // The starters' unit spec checks it runs on this Node.js (see starters.mjs).
    EXPECTED_NODE_VERSION: await versionOf(node),
  };
  const [command, prefix] = npmCli.length > 0 ? [node, npmCli] : ['npm', []];
  return run(command, [...prefix, ...npmArgs], { cwd, env, maxBuffer: 64 * 1024 * 1024, timeout });
}
const versionOf = async (node) => (await run(node, ['--version'])).stdout.trim();

// --- 1. Pack and inspect ------------------------------------------------------------------------
const work = await mkdtemp(join(tmpdir(), 'idempotency-package-'));
log(`work folder ${work}`);
let t = Date.now();
const { stdout: packJson } = await npm(libraryDir, ['pack', '--json', '--pack-destination', work]);
const packed = JSON.parse(packJson)[0];
const tarball = join(work, packed.filename);
log(`npm pack: ${packed.filename}, ${packed.entryCount} files, ${(packed.size / 1024).toFixed(0)} KiB (${seconds(t)})`);
await run('tar', ['-xzf', tarball, '-C', work]);
t = Date.now();
const { entryPoints } = await inspectTarball({
  repoRoot,
  files: packed.files.map((file) => file.path),
  unpacked: join(work, 'package'),
  tarball,
  check,
});
log(`tarball checks took ${seconds(t)}`);

// --- 2. Both faces load, and give the same objects ----------------------------------------------
// The repository's node_modules resolve the workspace package to this same dist/, with every
// optional peer present.
const subpaths = entryPoints.map(([subpath]) => `nestjs-idempotency${subpath.replace(/^\./, '')}`);
const sameObjects = `
const { createRequire } = await import('node:module');
const require = createRequire(process.cwd() + '/package.json');
const differ = [];
for (const specifier of ${JSON.stringify(subpaths)}) {
  const cjs = require(specifier);
  const esm = await import(specifier);
  const names = new Set([...Object.keys(cjs), ...Object.keys(esm)]);
  for (const name of names) if (name !== 'default' && esm[name] !== cjs[name]) differ.push(specifier + ' ' + name);
}
if (differ.length > 0) { console.error(differ.join('\\n')); process.exit(1); }`;
for (const node of runtimes) {
  const loaded = await run(node, ['--input-type=module', '-e', sameObjects], { cwd: repoRoot }).then(
    () => '',
    failureText,
  );
  check(
    loaded === '',
    `Node ${await versionOf(node)}: require() and import() of the ${subpaths.length} entry points give the same objects`,
    loaded,
  );
}

// --- 3. The apps: write, install with the README's command, type-check ---------------------------
const readme = await readFile(join(repoRoot, 'README.md'), 'utf8');
const readmeExample = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
check(readmeExample !== undefined, 'the README has a TypeScript example');
const readmeInstall = /^npm install (nestjs-idempotency ioredis)$/m.exec(readme)?.[1];
check(
  readmeInstall === README_INSTALLS.default.join(' '),
  `the README's install command is ${README_INSTALLS.default.join(' ')}`,
);

const toWrite = (value) => (typeof value === 'string' ? value : `${JSON.stringify(value, null, 2)}\n`);
const apps = [
  ...CONSUMERS.map((consumer) => ({
    name: consumer.name,
    consumer,
    install: consumer.install,
    files: {
      'package.json': consumerPackageJson(consumer),
      'tsconfig.json': CONSUMER_TSCONFIG,
      'src/main.ts': CONSUMER_MAIN_TS,
      'src/readme-example.ts': readmeExample ?? '',
      ...(consumer.install === README_INSTALLS.withTypeorm
        ? { 'src/entry-points.ts': TYPEORM_CONSUMER_ENTRY_POINTS_TS }
        : {}),
    },
  })),
  ...STARTERS.map((starter) => ({
    name: starter.name,
    starter,
    install: README_INSTALLS.default,
    files: { 'package.json': starter.packageJson, ...starter.files },
  })),
];

t = Date.now();
await Promise.all(
  apps.map(async (app) => {
    const dir = join(work, app.name);
    for (const [path, content] of Object.entries(app.files)) {
      await mkdir(dirname(join(dir, path)), { recursive: true });
      await writeFile(join(dir, path), toWrite(content));
    }
    // The README's command, the tarball standing for the package name (the command the README
    // gives for before the first publish). One shared npm cache.
    const install = app.install.map((spec) => (spec === 'nestjs-idempotency' ? tarball : spec));
    const installing = Date.now();
    const result = await npm(dir, ['install', ...install, '--no-audit', '--no-fund', '--prefer-offline']).then(
      () => '',
      failureText,
    );
    check(result === '', `${app.name}: npm install ${app.install.join(' ')} (${seconds(installing)})`, result);
  }),
);
log(`installs took ${seconds(t)}`);

t = Date.now();
await Promise.all(
  apps.map(async (app) => {
    const dir = join(work, app.name);
    const tsc = join(dir, 'node_modules/typescript/bin/tsc');
    const typescript = JSON.parse(await readFile(join(dir, 'node_modules/typescript/package.json'), 'utf8')).version;
    const nest = JSON.parse(await readFile(join(dir, 'node_modules/@nestjs/core/package.json'), 'utf8')).version;
    // Consumers are built (their dist/ runs next); starters are type-checked whole (specs included)
    // with their own tsconfig, and built by their own build script where something runs dist/.
    const builds = app.consumer !== undefined || app.starter.tests.length === 0;
    const compiled = await run(process.execPath, [tsc, ...(builds ? [] : ['--noEmit']), '-p', 'tsconfig.json'], {
      cwd: dir,
    }).then(() => '', failureText);
    const runner = ['jest', 'vitest'].find((name) => app.starter?.packageJson.devDependencies[name]);
    const runnerVersion = runner
      ? `, ${runner} ${JSON.parse(await readFile(join(dir, 'node_modules', runner, 'package.json'), 'utf8')).version}`
      : '';
    const what = app.consumer
      ? `${app.name} (${app.consumer.moduleType}, skipLibCheck: false): tsc builds the app and the README example`
      : `${app.starter.what}: tsc with its own tsconfig${runnerVersion}`;
    check(compiled === '', `${what} (TypeScript ${typescript}, @nestjs/core ${nest})`, compiled);
  }),
);
log(`type checks took ${seconds(t)}`);

// --- 4. On each Node.js: the apps run and pass their own tests -----------------------------------
const post = (url, path, key, body) =>
  fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });

/** First request 201, retry replayed with the same body, another body 422. */
async function retryFlow(url, path, body, otherBody) {
  const key = randomBytes(16).toString('hex');
  const first = await post(url, path, key, body);
  const firstBody = await first.text();
  const retry = await post(url, path, key, body);
  const retryBody = await retry.text();
  const other = await post(url, path, key, otherBody);
  const seen = {
    first: first.status,
    retry: retry.status,
    replayed: retry.headers.get('idempotent-replayed'),
    sameBody: retryBody === firstBody,
    other: other.status,
    otherCode: (await other.json()).code,
  };
  const wanted = {
    first: 201,
    retry: 201,
    replayed: 'true',
    sameBody: true,
    other: 422,
    otherCode: 'idempotency_key_reused',
  };
  return { ok: JSON.stringify(seen) === JSON.stringify(wanted), seen, firstBody };
}

const { Redis } = requireFromRepo('ioredis');
const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
await redis.connect().catch((error) => {
  throw new Error(`Redis not reachable at ${REDIS_URL} (start it, see README "Running the tests"): ${error.message}`);
});
const privateRedis = await startPrivateRedis();
const prefixes = [];

for (const node of runtimes) {
  const version = await versionOf(node);
  t = Date.now();

  // Starters: their own tests, in parallel (each listens on its own port).
  await Promise.all(
    STARTERS.filter((starter) => starter.tests.length > 0).flatMap((starter) =>
      starter.tests.map(async ([script]) => {
        const result = await npm(join(work, starter.name), ['run', script], { node }).then(
          ({ stdout, stderr }) => ({ ok: true, text: `${stdout}${stderr}` }),
          (error) => ({ ok: false, text: failureText(error) }),
        );
        const counted = /Tests:\s+(\d+) passed|Tests\s+(\d+) passed/.exec(stripVTControlCharacters(result.text));
        const passed = Number(counted?.[1] ?? counted?.[2] ?? 0);
        check(
          result.ok && passed > 0,
          `Node ${version}, ${starter.name}: npm run ${script} (${passed} passed)`,
          result.text,
        );
      }),
    ),
  );

  // The CommonJS app that also imports the package as an ES module.
  let dual;
  try {
    dual = await startApp(node, join(work, 'nest11-dual-load'));
    const flow = await retryFlow(dual.url, '/payments', { amount: 5 }, { amount: 6 });
    const injected = JSON.parse(flow.firstBody || '{}').engineInjected === true;
    const same = /same classes: true/.test(dual.output());
    check(
      flow.ok && injected && same,
      `Node ${version}, nest11-dual-load: require() and import() give the same classes; the ES module's route, registered by the CommonJS module, replays`,
      `same classes: ${same}, service injected: ${injected}, ${JSON.stringify(flow.seen)}\n${dual.output()}`,
    );
  } catch (error) {
    check(false, `Node ${version}, nest11-dual-load`, String(error));
  } finally {
    await dual?.stop();
  }

  // Consumers on the memory store and on Redis (shared server, key prefix of their own); the
  // README's example on our own Redis (it writes under the default prefix).
  for (const consumer of CONSUMERS) {
    const dir = join(work, consumer.name);
    for (const storeName of ['memory', 'redis']) {
      const prefix = `pkg-${consumer.name}-${randomBytes(4).toString('hex')}`;
      if (storeName === 'redis') prefixes.push(prefix);
      const env = storeName === 'redis' ? { REDIS_URL, REDIS_PREFIX: prefix } : {};
      const what = `Node ${version}, ${consumer.name}, ${storeName} store`;
      let app;
      try {
        app = await startApp(node, dir, env);
        const flow = await retryFlow(app.url, '/orders', { sku: 'book', quantity: 1 }, { sku: 'book', quantity: 2 });
        check(flow.ok, `${what}: 201, replayed 201, other body 422`, `got ${JSON.stringify(flow.seen)}`);
      } catch (error) {
        check(false, what, String(error));
      } finally {
        await app?.stop();
      }
    }
    let example;
    try {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      example = await startProcess(node, 'dist/readme-example.js', {
        cwd: dir,
        env: { PORT: String(port), REDIS_URL: privateRedis.url },
        what: 'the README example',
        ready: () => answers(url),
      });
      const flow = await retryFlow(url, '/orders', { sku: 'book', quantity: 1 }, { sku: 'book', quantity: 2 });
      check(
        flow.ok,
        `Node ${version}, the README example as ${consumer.moduleType === 'module' ? 'ESM' : 'CommonJS'}: runs as written, 201, replayed, 422`,
        `got ${JSON.stringify(flow.seen)}\n${example.output()}`,
      );
    } catch (error) {
      check(false, `Node ${version}, the README example in ${consumer.name}`, String(error));
    } finally {
      await example?.stop();
    }
  }
  log(`Node ${version}: apps took ${seconds(t)}`);
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
await privateRedis.stop();

if (keep) log(`kept ${work}`);
else await rm(work, { recursive: true, force: true });
log(`total ${seconds(started)}`);
console.log(`${passes} passed, ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
