// package.json's `main`, `types`, `typesVersions` and `exports`, derived from ENTRY_POINTS
// (scripts/entry-points.mjs). Run as a script, it writes them into package.json; with --check it
// only fails when package.json differs (the pack-and-consume check and the build call it).
//
// Layout (docs/packaging.md says why): dist/cjs/ is the one implementation, CommonJS; dist/esm/
// holds an ES module face per entry point that re-exports it, so an app that loads the package
// both ways still has one copy of every class and injection token.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ENTRY_POINTS } from './entry-points.mjs';

export const LIBRARY_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const MANIFEST = join(LIBRARY_ROOT, 'package.json');

/** The folder of an entry point under src/ or a dist/ build ('' for the package itself). */
export const entryFolder = (entry) => (entry === '.' ? '' : `${entry}/`);

/** The package.json fields for `entries`. */
export function packageFields(entries = ENTRY_POINTS) {
  const exportsMap = {};
  const typesVersions = {};
  for (const entry of entries) {
    const folder = entryFolder(entry);
    exportsMap[entry === '.' ? '.' : `./${entry}`] = {
      // The TypeScript sources, for the repository's own type check and tests (tsconfig.json
      // customConditions, jest.config.cjs): no build needed there. No consumer sets it.
      'nestjs-idempotency:source': `./src/${folder}index.ts`,
      import: { types: `./dist/esm/${folder}index.d.ts`, default: `./dist/esm/${folder}index.js` },
      require: { types: `./dist/cjs/${folder}index.d.ts`, default: `./dist/cjs/${folder}index.js` },
    };
    if (entry !== '.') typesVersions[entry] = [`./dist/cjs/${folder}index.d.ts`];
  }
  exportsMap['./package.json'] = './package.json';
  return {
    // For `moduleResolution: node` (node10), which reads no `exports`: the package itself and,
    // through typesVersions, every subpath.
    main: './dist/cjs/index.js',
    types: './dist/cjs/index.d.ts',
    typesVersions: { '*': typesVersions },
    exports: exportsMap,
  };
}

/** Differences between package.json and the derived fields, as field names. */
export function staleFields(manifest = JSON.parse(readFileSync(MANIFEST, 'utf8'))) {
  return Object.entries(packageFields()).flatMap(([field, wanted]) =>
    JSON.stringify(manifest[field]) === JSON.stringify(wanted) ? [] : [field],
  );
}

/** Writes the derived fields into package.json, in place of the old ones (other fields untouched). */
export function writePackageFields() {
  const manifest = JSON.parse(readFileSync(MANIFEST, 'utf8'));
  const fields = packageFields();
  const updated = {};
  for (const [key, value] of Object.entries(manifest)) {
    if (key === 'exports') Object.assign(updated, fields);
    else if (!(key in fields)) updated[key] = value;
  }
  if (!('exports' in manifest)) Object.assign(updated, fields);
  writeFileSync(MANIFEST, `${JSON.stringify(updated, null, 2)}\n`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes('--check')) {
    const stale = staleFields();
    if (stale.length > 0) {
      console.error(
        `libs/idempotency/package.json: ${stale.join(', ')} differ from scripts/entry-points.mjs; run node libs/idempotency/scripts/package-fields.mjs`,
      );
      process.exit(1);
    }
  } else writePackageFields();
}
