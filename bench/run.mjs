// `npm run bench [-- --quick] [-- --beside-node 20]`: builds the library and the bench (server and
// driver, see bench/build.mjs), then runs the driver with the servers on Node.js 24 (BENCH_NODE
// picks another); `--beside-node <spec>` runs it again on that version (results in
// bench/results/latest-node<spec>.json) and prints the two side by side. See bench/README.md.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildBench, repoRoot, useBenchServerNode } from './build.mjs';

const argv = process.argv.slice(2);
const besideAt = argv.indexOf('--beside-node');
const beside = besideAt >= 0 ? argv[besideAt + 1] : undefined;
if (besideAt >= 0 && !beside) throw new Error('--beside-node needs a Node.js version, e.g. --beside-node 20');
const driverArgv = besideAt >= 0 ? argv.filter((_, i) => i !== besideAt && i !== besideAt + 1) : argv;

const distDir = await buildBench('bench', 'bench/**/*.ts');
const { runBench } = await import(pathToFileURL(join(distDir, 'bench/driver/main.js')).href);
const run = async (spec, resultsFile) => {
  const version = await useBenchServerNode(spec);
  await runBench({
    repoRoot,
    serverMainJs: join(distDir, 'bench/app/main.js'),
    argv: [...driverArgv, '--results-file', resultsFile],
  });
  return { version, summary: JSON.parse(await readFile(join(repoRoot, 'bench/results', resultsFile), 'utf8')) };
};

const primary = await run(undefined, 'latest.json');
if (beside) {
  const other = await run(beside, `latest-node${beside}.json`);
  const { formatBeside } = await import(pathToFileURL(join(distDir, 'bench/driver/report.js')).href);
  console.log(`\n${formatBeside(primary, other)}`);
}
