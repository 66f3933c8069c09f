import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import type { UploadedFileDigest } from './fingerprint/fingerprint.js';

/**
 * A file as multer (`@nestjs/platform-express`) and the multipart interceptors of
 * `@nestjs/platform-fastify` store it: its content is in `buffer` (memory storage) or at `path`
 * (disk storage). Other storage engines keep it elsewhere, out of the fingerprint's sight.
 */
interface StoredFile {
  fieldname?: unknown;
  originalname?: unknown;
  mimetype?: unknown;
  encoding?: unknown;
  buffer?: unknown;
  path?: unknown;
}

/** A file an upload interceptor stored where the fingerprint cannot read it back. */
export class UploadedFileNotVisibleError extends Error {
  constructor(readonly field: string) {
    super(
      `the file uploaded in field "${field}" has neither a buffer nor a path (a storage engine that keeps it elsewhere, or a stream handed to the handler)`,
    );
    this.name = this.constructor.name;
  }
}

/**
 * The files an upload interceptor put on the request (`request.file`, then `request.files` as a
 * list, or as lists by field name, sorted by field name), or `undefined` when there are none.
 */
export function uploadedFilesOf(request: { file?: unknown; files?: unknown }): StoredFile[] | undefined {
  const files: StoredFile[] = [];
  if (isFile(request.file)) files.push(request.file);
  const { files: listed } = request;
  if (Array.isArray(listed)) {
    files.push(...listed.filter(isFile));
  } else if (listed !== null && typeof listed === 'object') {
    const byField = listed as Record<string, unknown>;
    for (const field of Object.keys(byField).sort()) {
      const list = byField[field];
      if (Array.isArray(list)) files.push(...list.filter(isFile));
    }
  }
  return files.length > 0 || isFileList(request.files) ? files : undefined;
}

/**
 * The field, filename, content type, transfer encoding and SHA-256 of each file, read from its
 * buffer or its path on disk.
 *
 * @throws UploadedFileNotVisibleError for a file with neither.
 */
export async function digestUploadedFiles(files: StoredFile[]): Promise<UploadedFileDigest[]> {
  const digests: UploadedFileDigest[] = [];
  for (const file of files) {
    const field = String(file.fieldname ?? '');
    let sha256: Buffer;
    if (Buffer.isBuffer(file.buffer)) sha256 = createHash('sha256').update(file.buffer).digest();
    else if (typeof file.path === 'string' && file.path !== '') sha256 = await digestFile(file.path);
    else throw new UploadedFileNotVisibleError(field);
    digests.push({
      field,
      filename: typeof file.originalname === 'string' ? file.originalname : undefined,
      mimeType: typeof file.mimetype === 'string' ? file.mimetype : undefined,
      encoding: typeof file.encoding === 'string' ? file.encoding : undefined,
      sha256,
    });
  }
  return digests;
}

function isFile(value: unknown): value is StoredFile {
  return value !== null && typeof value === 'object' && 'fieldname' in value;
}

/** `request.files` set by an interceptor that received no file: an empty list or record. */
function isFileList(value: unknown): boolean {
  return Array.isArray(value) || (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === null);
}

function digestFile(path: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    createReadStream(path)
      .on('data', (chunk) => hash.update(chunk))
      .once('error', reject)
      .once('end', () => resolve(hash.digest()));
  });
}
