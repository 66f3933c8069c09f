// `prepack`: the package's README (the page npm shows) is made from the repository's README, kept
// in one place, the root. The copy (ignored by git) keeps the library's part only, up to the
// repository's contributor sections ("## This repository"), and turns relative links into
// absolute ones on the repository (package.json `repository`), since docs/ is not in the tarball.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const repository = manifest.repository.url.replace(/^git\+/, '').replace(/\.git$/, '');
const readme = readFileSync(join(root, '../../README.md'), 'utf8');

const contributorSections = readme.search(/^## This repository$/m);
const library = contributorSections === -1 ? readme : readme.slice(0, contributorSections);
const absolute = library.replace(/\]\((?!https?:\/\/|#|mailto:)([^)\s]+)\)/g, (_, target) => {
  const path = target.replace(/^\.\//, '');
  const kind = /\/$|^[^.]+$/.test(path.split('#')[0]) ? 'tree' : 'blob';
  return `](${repository}/${kind}/main/${path})`;
});
writeFileSync(join(root, 'README.md'), `${absolute.trimEnd()}\n`);
