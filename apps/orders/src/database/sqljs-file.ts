import { mkdirSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';

/**
 * The sql.js database lives in memory and is written to its file after every commit. TypeORM's
 * own save overwrites the file in place, so a crash mid-write would leave half a database; this
 * writes a temporary file and renames it over the old one (atomic on POSIX), one save at a
 * time, in commit order.
 */
export function atomicFileSaver(file: string): (data: Uint8Array) => Promise<void> {
  mkdirSync(dirname(file), { recursive: true });
  let last: Promise<void> = Promise.resolve();
  return (data: Uint8Array) => {
    const copy = Buffer.from(data);
    const save = last.then(async () => {
      const temporary = `${file}.${process.pid}.tmp`;
      await writeFile(temporary, copy);
      await rename(temporary, file);
    });
    last = save.catch(() => undefined);
    return save;
  };
}
