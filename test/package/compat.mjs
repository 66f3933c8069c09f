#!/usr/bin/env node
// `npm run compat`: the pack-and-consume check (pack-and-consume.mjs) with the consumer apps, their
// own test runs and the require()/import() checks on the given Node.js versions instead of this
// Node (binaries from the npm registry, see node-binaries.mjs). .ci/run uses it for 20.19, 22, 24.
// Usage: npm run compat [-- 20.19 22 24]   (default: 22 24)
import { spawn } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { execFile } from 'node:child_process';
import { nodeBinary } from './node-binaries.mjs';

const run = promisify(execFile);
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const specs = process.argv.slice(2).length > 0 ? process.argv.slice(2) : ['22', '24'];

const binaries = [];
for (const spec of specs) {
  const binary = await nodeBinary(spec);
  console.log(`[compat] Node ${(await run(binary, ['--version'])).stdout.trim()}: ${binary}`);
  binaries.push(binary);
}

const child = spawn(
  process.execPath,
  [join(repoRoot, 'test/package/pack-and-consume.mjs'), ...binaries.flatMap((binary) => ['--node', binary])],
  { stdio: 'inherit' },
);
child.once('exit', (code) => process.exit(code ?? 1));
