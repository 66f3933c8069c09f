import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readVisibleBody, RequestBodyNotVisibleError, type BodyCarrier } from './request-body.js';
import { UploadedFileNotVisibleError } from './uploaded-files.js';

/**
 * What the fingerprint sees of a body another layer has read already (the request stream is
 * out of the picture: these requests have none, as after a body parser or multer).
 */
describe('readVisibleBody after another layer read the body', () => {
  const dir = mkdtempSync(join(tmpdir(), 'idem-visible-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const read = (request: Partial<BodyCarrier>) => readVisibleBody({ headers: {}, ...request }, 1024);
  const multipart = { 'content-type': 'multipart/form-data; boundary=x', 'content-length': '300' };
  const sha = (data: string | Buffer) => createHash('sha256').update(data).digest();

  it('B.4 rule 15: the kept raw bytes win over anything parsed', async () => {
    const raw = Buffer.from('{"amount":1.0}');
    expect(await read({ rawBody: raw, body: { amount: 1 } })).toEqual({ source: 'raw', bytes: raw });
    expect(await read({ body: raw, headers: { 'content-type': 'application/octet-stream' } })).toEqual({
      source: 'raw',
      bytes: raw,
    });
  });

  it('B.4 rule 15: a JSON, text or form body parsed without its bytes is taken as parsed (and the caller warns)', async () => {
    const json = await read({ body: { amount: 1 }, headers: { 'content-type': 'application/json' } });
    expect(json).toEqual({ source: 'parsed', bytes: Buffer.from('{"amount":1}') });
    expect(await read({ body: 'hello', headers: { 'content-type': 'text/plain' } })).toEqual({
      source: 'parsed',
      bytes: Buffer.from('hello'),
    });
    const fields = { to: '%zz%41' };
    expect(await read({ body: fields, headers: { 'content-type': 'application/x-www-form-urlencoded' } })).toEqual({
      source: 'parsed',
      parsed: { fields },
    });
  });

  it('B.4 rule 15: no body is no body; a declared body nothing kept cannot be seen', async () => {
    expect(await read({})).toEqual({ source: 'none' });
    expect(await read({ headers: { 'content-length': '0' } })).toEqual({ source: 'none' });
    await expect(read({ headers: { 'content-length': '12', 'content-type': 'application/xml' } })).rejects.toThrow(
      RequestBodyNotVisibleError,
    );
    await expect(read({ headers: { 'transfer-encoding': 'chunked' } })).rejects.toThrow(RequestBodyNotVisibleError);
  });

  it('B.4 rule 15: an object parsed from another media type cannot be told complete: it fails, never fingerprinted in part', async () => {
    await expect(
      read({ body: { order: 1 }, headers: { 'content-type': 'application/xml', 'content-length': '20' } }),
    ).rejects.toThrow(/parsed by another layer into an object/);
  });

  it('B.4 rule 15: multer\u2019s fields and files: memory storage by buffer, disk storage by path, lists by field name', async () => {
    const path = join(dir, 'upload-1');
    writeFileSync(path, 'on disk');
    const fields = Object.assign(Object.create(null), { note: 'x' });
    const visible = await read({
      headers: multipart,
      body: fields,
      files: {
        zeta: [
          {
            fieldname: 'zeta',
            originalname: 'z.txt',
            mimetype: 'text/plain',
            encoding: '7bit',
            buffer: Buffer.from('in memory'),
          },
        ],
        alpha: [{ fieldname: 'alpha', originalname: 'a.txt', mimetype: 'text/plain', encoding: '7bit', path }],
      },
    });
    expect(visible).toEqual({
      source: 'uploads',
      parsed: {
        fields,
        files: [
          { field: 'alpha', filename: 'a.txt', mimeType: 'text/plain', encoding: '7bit', sha256: sha('on disk') },
          { field: 'zeta', filename: 'z.txt', mimeType: 'text/plain', encoding: '7bit', sha256: sha('in memory') },
        ],
      },
    });
  });

  it('B.4 rule 15: an upload without files keeps its fields; a file kept out of sight fails', async () => {
    const fields = Object.assign(Object.create(null), { note: 'x' });
    expect(await read({ headers: multipart, body: fields })).toEqual({
      source: 'uploads',
      parsed: { fields, files: [] },
    });
    await expect(
      read({
        headers: multipart,
        body: fields,
        file: { fieldname: 'file', originalname: 'a', size: 3, location: 's3://b/k' },
      }),
    ).rejects.toThrow(UploadedFileNotVisibleError);
    await expect(read({ headers: multipart, file: { fieldname: 'file', stream: {} } })).rejects.toThrow(
      /neither a buffer nor a path/,
    );
  });

  it('B.4 rule 15: a multipart body read by something that is not an upload interceptor cannot be seen', async () => {
    await expect(read({ headers: multipart })).rejects.toThrow(RequestBodyNotVisibleError);
    await expect(read({ headers: multipart, body: { note: 'x' } })).rejects.toThrow(/upload interceptor/);
  });
});
