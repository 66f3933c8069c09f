// `prepack`: the repository's README is the package's README (npm shows it), and it is kept in
// one place: the root. The copy is ignored by git.
import { copyFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
copyFileSync(join(root, '../../README.md'), join(root, 'README.md'));
