// What the pack-and-consume check (pack-and-consume.mjs) reads in the tarball before any app
// installs it: the files, the two faces of every entry point, the packages dist/ imports, no
// top-level await, no import.meta in the CommonJS build, the README, and publint and
// @arethetypeswrong/cli on the package as published.
import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { builtinModules, createRequire } from 'node:module';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

async function filesUnder(dir) {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath ?? entry.path, entry.name)));
}

/**
 * Runs every check on the packed files (`files`, from npm pack), the unpacked package folder
 * (`unpacked`) and the tarball, reporting through `check(ok, what, detail)`.
 */
export async function inspectTarball({ repoRoot, files, unpacked, tarball, check }) {
  const requireFromRepo = createRequire(join(repoRoot, 'package.json'));
  const manifest = JSON.parse(await readFile(join(unpacked, 'package.json'), 'utf8'));

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
  for (const field of ['repository', 'homepage', 'bugs']) {
    check(manifest[field] !== undefined, `package.json sets ${field}`);
  }

  // Both faces of every entry point, each with its declarations.
  const entryPoints = Object.entries(manifest.exports).filter(([subpath]) => subpath !== './package.json');
  for (const [subpath, conditions] of entryPoints) {
    const wanted = ['import', 'require'].flatMap((face) => [conditions[face]?.types, conditions[face]?.default]);
    const paths = wanted.map((path) => String(path).replace(/^\.\//, ''));
    check(
      paths.every((path) => files.includes(path)) && paths[0].endsWith('.d.ts') && paths[2].endsWith('.d.ts'),
      `entry point ${subpath}: import and require, each with JS and .d.ts, are packed`,
      `missing: ${paths.filter((path) => !files.includes(path)).join(', ')}`,
    );
  }

  // The README is the library's: no section for the repository's contributors, links absolute.
  const readme = await readFile(join(unpacked, 'README.md'), 'utf8');
  const relativeLinks = [...readme.matchAll(/\]\((?!https?:\/\/|#)([^)]+)\)/g)].map((match) => match[1]);
  check(relativeLinks.length === 0, 'README.md in the tarball: every link is absolute', relativeLinks.join('\n'));
  check(!/^## This repository/m.test(readme), 'README.md in the tarball: no contributor sections');

  const distFiles = (await filesUnder(join(unpacked, 'dist'))).filter(
    (path) => path.endsWith('.js') || path.endsWith('.d.ts'),
  );
  const sources = new Map();
  for (const path of distFiles) sources.set(path, await readFile(join(unpacked, 'dist', path), 'utf8'));

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
  for (const [path, source] of sources) {
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
  // And nothing ESM-only in the CommonJS build (tsc refuses import.meta there; this reads the output).
  const topLevelAwaits = [];
  const jsFiles = distFiles.filter((file) => file.endsWith('.js'));
  for (const path of jsFiles) {
    const source = ts.createSourceFile(path, sources.get(path), ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
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
    `no top-level await in the ${jsFiles.length} modules of dist/`,
    topLevelAwaits.join('\n'),
  );
  const esmOnly = [];
  for (const path of jsFiles.filter((file) => file.startsWith('cjs/'))) {
    const source = ts.createSourceFile(path, sources.get(path), ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
    const visit = (node) => {
      if (ts.isMetaProperty(node) && node.keywordToken === ts.SyntaxKind.ImportKeyword) esmOnly.push(`dist/${path}`);
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  check(esmOnly.length === 0, 'no import.meta in dist/cjs', esmOnly.join('\n'));

  // The linters, on exactly what npm publishes.
  const bin = (name) => join(repoRoot, 'node_modules/.bin', name);
  const lint = async (what, command, args, clean) => {
    const output = await run(command, args, { cwd: repoRoot, maxBuffer: 16 * 1024 * 1024 }).then(
      ({ stdout }) => ({ ok: true, text: stdout }),
      (error) => ({ ok: false, text: `${error.stdout}${error.stderr}` }),
    );
    check(output.ok && clean.test(output.text), what, output.text);
  };
  await lint('publint: no errors, warnings or suggestions', bin('publint'), ['run', '--strict', tarball], /All good/);
  await lint(
    `@arethetypeswrong/cli: no problem for the ${entryPoints.length} entry points (node10, node16 CJS, node16 ESM, bundler)`,
    bin('attw'),
    [tarball, '--format', 'table-flipped', '--no-color'],
    /No problems found/,
  );
  return { manifest, entryPoints };
}
