import { createHash, type Hash } from 'node:crypto';
import busboy from 'busboy';

/** One part of a `multipart/form-data` body as the fingerprint compares it (docs/contract.md B.4 rule 15). */
export interface MultipartPart {
  kind: 'field' | 'file';
  name: string | undefined;
  filename: string | undefined;
  mimeType: string;
  encoding: string;
  /** SHA-256 of the content, set once the parser has closed. */
  digest: Buffer;
}

const NO_DIGEST = Buffer.alloc(0);

const UNLIMITED = {
  fieldNameSize: Infinity,
  fieldSize: Infinity,
  fields: Infinity,
  fileSize: Infinity,
  files: Infinity,
  parts: Infinity,
};

/**
 * Reads a multipart body part by part with busboy, hashing each part's content, or returns
 * `undefined` when it cannot be read exactly (malformed, a limit hit, or a field whose charset
 * decoding replaced bytes).
 * Fields default to latin1, which maps bytes to characters one to one, so their content is
 * exact unless the part declares another charset; `preservePath` keeps directory names in
 * filenames, which busboy would otherwise strip.
 */
export function readMultipart(contentType: string, body: Buffer): Promise<MultipartPart[] | undefined> {
  return new Promise((resolve) => {
    const parts: Array<[MultipartPart, Hash]> = [];
    let lossy = false;
    let settled = false;
    const settle = (ok: boolean): void => {
      if (settled) return;
      settled = true;
      resolve(ok && !lossy ? parts.map(([part, content]) => ({ ...part, digest: content.digest() })) : undefined);
    };
    let parser: busboy.Busboy;
    try {
      parser = busboy({
        headers: { 'content-type': contentType },
        preservePath: true,
        defCharset: 'latin1',
        limits: UNLIMITED,
      });
    } catch {
      settle(false);
      return;
    }
    parser.on('file', (name, stream, info) => {
      const content = createHash('sha256');
      const { filename, mimeType, encoding } = info;
      parts.push([{ kind: 'file', name, filename, mimeType, encoding, digest: NO_DIGEST }, content]);
      stream.on('data', (chunk: Buffer) => content.update(chunk));
      stream.on('limit', () => (lossy = true));
      stream.on('error', () => settle(false));
    });
    parser.on('field', (name, value: string | undefined, info) => {
      if (value === undefined || info.nameTruncated || info.valueTruncated || value.includes('\uFFFD')) lossy = true;
      const content = createHash('sha256').update(Buffer.from(value ?? '', 'utf16le'));
      const { mimeType, encoding } = info;
      parts.push([{ kind: 'field', name, filename: undefined, mimeType, encoding, digest: NO_DIGEST }, content]);
    });
    for (const limit of ['partsLimit', 'filesLimit', 'fieldsLimit'] as const) parser.on(limit, () => (lossy = true));
    parser.on('error', () => settle(false));
    parser.on('close', () => settle(true));
    try {
      parser.end(body);
    } catch {
      settle(false);
    }
  });
}
