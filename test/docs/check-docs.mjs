#!/usr/bin/env node
// `npm run check:docs` (and .ci/run): the docs say what the code is.
//   1. Every name the README's "Public API" lists under an entry point is exported by that entry
//      point, and every declaration marked @publicApi is exported by one of them.
//   2. No doc (README, docs/, CONTRIBUTING, apps/orders/README) teaches a @deprecated export: a
//      line that names one says it is deprecated.
//   3. No comment in the code, and no relative link in a doc, cites a file that does not exist.
// Prints one line per problem and exits 1 if there is any.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ENTRY_POINTS } from '../../libs/idempotency/scripts/entry-points.mjs';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const ts = createRequire(join(repoRoot, 'package.json'))('typescript');
const src = join(repoRoot, 'libs/idempotency/src');
const problems = [];
const read = (path) => readFileSync(join(repoRoot, path), 'utf8');

// --- The library's exports, per entry point (types included), read by the compiler ---------------
const entryFile = (entry) => join(src, entry === '.' ? '' : entry, 'index.ts');
const program = ts.createProgram(
  ENTRY_POINTS.map(entryFile),
  ts.convertCompilerOptionsFromJson(
    {
      module: 'nodenext',
      moduleResolution: 'nodenext',
      target: 'es2023',
      types: ['node'],
      noEmit: true,
      skipLibCheck: true,
    },
    repoRoot,
  ).options,
);
const checker = program.getTypeChecker();
const exportsOf = new Map();
for (const entry of ENTRY_POINTS) {
  const symbol = checker.getSymbolAtLocation(program.getSourceFile(entryFile(entry)));
  exportsOf.set(entry, new Set(checker.getExportsOfModule(symbol).map((exported) => exported.name)));
}
const exportedAnywhere = new Set([...exportsOf.values()].flatMap((names) => [...names]));

// --- 1. The README's public API is exported ----------------------------------------------------
const readme = read('README.md');
const publicApi = readme.slice(
  readme.indexOf('## Public API'),
  readme.indexOf('\n## ', readme.indexOf('## Public API') + 1),
);
// One bullet per name list: a line opening with "-" and the lines that continue it.
const bullets = publicApi.split('\n').reduce((list, line) => {
  if (/^\s*- /.test(line)) list.push(line);
  else if (/^\s{2,}\S/.test(line) && list.length > 0) list[list.length - 1] += ` ${line.trim()}`;
  return list;
}, []);
let entry;
for (const bullet of bullets) {
  const heading = /^- \*\*`(?:nestjs-idempotency)?(\/[\w-]+)?`\*\*/.exec(bullet);
  if (heading) entry = heading[1] ? heading[1].slice(1) : '.';
  if (entry === undefined) continue;
  // Parenthesised asides name members, calls and aliases ("(`getKey`, ...)", "(`run()`)"), not exports.
  let listed = bullet.replace(/^- \*\*`[^`]*`\*\*:?/, '');
  while (/\([^()]*\)/.test(listed)) listed = listed.replace(/\([^()]*\)/g, '');
  for (const [, name] of listed.matchAll(/`([A-Za-z_$][\w$]*)`/g)) {
    if (name === 'protected') continue;
    if (!exportsOf.get(entry)?.has(name)) {
      problems.push(
        `README "Public API" lists ${name} under ${entry === '.' ? 'nestjs-idempotency' : `/${entry}`}, which does not export it`,
      );
    }
  }
}

// --- Source files, parsed once --------------------------------------------------------------------
const SKIP = new Set(['node_modules', 'dist', '.git', 'coverage', '.data', 'results']);
function filesUnder(dir, extensions) {
  const found = [];
  for (const entry of readdirSync(join(repoRoot, dir), { withFileTypes: true })) {
    if (SKIP.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...filesUnder(path, extensions));
    else if (extensions.some((extension) => entry.name.endsWith(extension))) found.push(path);
  }
  return found;
}
const codeFiles = ['libs', 'apps', 'test', 'bench', 'model', '.ci'].flatMap((dir) =>
  existsSync(join(repoRoot, dir)) ? filesUnder(dir, ['.ts', '.mjs', '.cjs', '.js']) : [],
);
codeFiles.push(
  ...['jest.config.cjs', 'jest.soak.config.cjs', 'eslint.config.mjs'].filter((path) =>
    existsSync(join(repoRoot, path)),
  ),
);

/** Every comment of a file, with its line. */
function commentsOf(path, sourceFile) {
  const text = sourceFile.text;
  const seen = new Set();
  const comments = [];
  const collect = (ranges) => {
    for (const range of ranges ?? []) {
      if (seen.has(range.pos)) continue;
      seen.add(range.pos);
      comments.push({
        text: text.slice(range.pos, range.end),
        line: sourceFile.getLineAndCharacterOfPosition(range.pos).line + 1,
      });
    }
  };
  const visit = (node) => {
    collect(ts.getLeadingCommentRanges(text, node.pos));
    collect(ts.getTrailingCommentRanges(text, node.end));
    ts.forEachChild(node, visit);
  };
  visit(sourceFile);
  collect(ts.getLeadingCommentRanges(text, sourceFile.endOfFileToken.pos));
  return comments.map((comment) => ({ ...comment, path }));
}

// @publicApi declarations of the library are exported.
for (const path of codeFiles.filter((file) => file.startsWith('libs/idempotency/src/') && !file.includes('.spec.'))) {
  const sourceFile = ts.createSourceFile(path, read(path), ts.ScriptTarget.Latest, true);
  for (const statement of sourceFile.statements) {
    const tags = ts.getJSDocTags(statement).map((tag) => tag.tagName.text);
    if (!tags.includes('publicApi')) continue;
    const names = ts.isVariableStatement(statement)
      ? statement.declarationList.declarations.map((declaration) => declaration.name.getText(sourceFile))
      : [statement.name?.getText(sourceFile)];
    for (const name of names.filter(Boolean)) {
      if (!exportedAnywhere.has(name))
        problems.push(`${path}: ${name} is marked @publicApi but no entry point exports it`);
    }
  }
}

// --- 2. Docs teach current names ---------------------------------------------------------------
const deprecated = new Set();
for (const names of exportsOf.values()) {
  for (const name of names) {
    const symbol = [...ENTRY_POINTS]
      .map((e) => checker.getSymbolAtLocation(program.getSourceFile(entryFile(e))))
      .flatMap((moduleSymbol) =>
        checker.getExportsOfModule(moduleSymbol).filter((exported) => exported.name === name),
      )[0];
    const target = symbol && symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
    if (target?.getJsDocTags(checker).some((tag) => tag.name === 'deprecated')) deprecated.add(name);
  }
}
const docs = ['README.md', 'CONTRIBUTING.md', 'apps/orders/README.md', ...filesUnder('docs', ['.md'])].filter((path) =>
  existsSync(join(repoRoot, path)),
);
for (const path of docs) {
  read(path)
    .split('\n')
    .forEach((line, index) => {
      for (const name of deprecated) {
        if (new RegExp(`\\b${name}\\b`).test(line) && !/deprecated/i.test(line)) {
          problems.push(`${path}:${index + 1}: teaches ${name}, a deprecated alias (use its new name)`);
        }
      }
    });
}

// --- 3. Cited files exist ------------------------------------------------------------------------
const allFiles = [...codeFiles, ...docs, ...filesUnder('.', ['.md', '.json', '.pml', '.yml', '.yaml', '.sql'])];
const basenames = new Set(
  [...allFiles, ...ENTRY_POINTS.map(entryFile).map((file) => relative(repoRoot, file))].map((file) => basename(file)),
);
const CITED = /(?<![\w@./-])((?:[\w.-]+\/)*[\w-]+(?:\.[\w-]+)*\.(?:ts|mts|cts|mjs|cjs|md|pml|json|ya?ml))(?![\w/-])/g;
/** Whether `cited`, found in `from`, names a file of the repository. */
function exists(cited, from) {
  const candidates = [
    join(repoRoot, cited),
    join(repoRoot, dirname(from), cited),
    join(repoRoot, 'libs/idempotency', cited),
    join(repoRoot, 'libs/idempotency/src', cited),
  ];
  if (candidates.some((candidate) => existsSync(candidate))) return true;
  // A bare file name (`scoped-key.ts`) is found anywhere; a built file (`.js`) by its source.
  return !cited.includes('/') && basenames.has(basename(cited));
}
// Names that are not files of this repository: other packages' files and generated ones.
const FOREIGN =
  /^(package(-lock)?\.json|tsconfig[\w.-]*\.json|README\.md|CHANGELOG\.md|LICENSE\.md|index\.d\.ts|\w+\.d\.ts)$|node_modules|^dist\//;
for (const path of codeFiles) {
  const sourceFile = ts.createSourceFile(path, read(path), ts.ScriptTarget.Latest, true);
  for (const comment of commentsOf(path, sourceFile)) {
    // An @example names files of the reader's project, not of this one.
    const text = comment.text.replace(/@example[\s\S]*?(?=@\w|\*\/|$)/g, '');
    for (const [, cited] of text.matchAll(CITED)) {
      // `res.json`, `Response.json`: a method, not a file.
      if (cited.endsWith('.json') && /^[\w]+\.json$/.test(cited) && !basenames.has(cited)) continue;
      if (FOREIGN.test(cited) || cited.includes('<') || /^https?:/.test(cited)) continue;
      if (!exists(cited, path))
        problems.push(`${path}:${comment.line}: a comment cites ${cited}, which does not exist`);
    }
  }
}
for (const path of docs) {
  for (const [, target] of read(path).matchAll(/\]\((?!https?:\/\/|#|mailto:)([^)#\s]+)(?:#[^)]*)?\)/g)) {
    if (!existsSync(join(repoRoot, dirname(path), target)))
      problems.push(`${path}: links to ${target}, which does not exist`);
  }
}

for (const problem of problems) console.log(`[check:docs] ${problem}`);
console.log(
  `[check:docs] ${problems.length} problem(s); ${exportedAnywhere.size} exports in ${ENTRY_POINTS.length} entry points, ${deprecated.size} deprecated (${[...deprecated].join(', ')}), ${codeFiles.length} code files and ${docs.length} docs read`,
);
process.exit(problems.length === 0 ? 0 : 1);
