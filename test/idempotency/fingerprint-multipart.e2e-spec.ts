import {
  Body,
  Controller,
  Module,
  Post,
  Req,
  UploadedFile,
  UploadedFiles,
  UseInterceptors,
  type INestApplication,
  type LoggerService,
} from '@nestjs/common';
import { INTERCEPTORS_METADATA } from '@nestjs/common/constants.js';
import { NestFactory } from '@nestjs/core';
import { FileInterceptor, FilesInterceptor } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import busboy from 'busboy';
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { Idempotent, IdempotencyInterceptor, IdempotencyModule, MemoryIdempotencyStore } from 'nestjs-idempotency';
import { send } from '../support/http/send.js';

/**
 * docs/contract.md B.4 rule 15: a multipart body is fingerprinted part by part (name, filename, content
 * type, SHA-256 of the content), file parts included, whatever upload interceptor the route uses
 * and in either decorator order; a body the fingerprint cannot see fails loudly instead of
 * being fingerprinted in part. Issue 18 found two uploads that differed only in the file
 * replaying each other behind multer's `FileInterceptor`.
 *
 * `@Idempotent()` binds its interceptor with `UseInterceptors`, and decorators apply bottom-up,
 * so the one written lower runs first:
 * - `@Idempotent()` above `@UseInterceptors(FileInterceptor())`: multer has read the body; the
 *   fingerprint takes the fields and the stored files (buffer, or path on disk);
 * - `@Idempotent()` below it: nothing has read the body; the fingerprint reads it, and puts it
 *   back for multer.
 */
const uploadDir = mkdtempSync(join(tmpdir(), 'idem-uploads-'));

interface StoredFile {
  fieldname: string;
  originalname: string;
  mimetype: string;
  size: number;
  buffer?: Buffer;
  path?: string;
}

/** A storage engine that keeps nothing the fingerprint could read back (as an S3 uploader would). */
const discardingStorage = {
  _handleFile(_req: unknown, file: { stream: Readable }, callback: (error: Error | null, info?: object) => void) {
    let size = 0;
    file.stream.on('data', (chunk: Buffer) => (size += chunk.length));
    file.stream.on('end', () => callback(null, { size, location: 'remote://bucket/object' }));
  },
  _removeFile(_req: unknown, _file: unknown, callback: (error: Error | null) => void) {
    callback(null);
  },
};

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

function describeFile(file: StoredFile | undefined) {
  if (!file) return null;
  const content = file.buffer ?? (file.path ? readFileSync(file.path) : undefined);
  return {
    field: file.fieldname,
    name: file.originalname,
    type: file.mimetype,
    size: file.size,
    sha256: content ? sha256(content) : null,
  };
}

@Controller('express')
class UploadsController {
  seq = 0;

  @Post('after-multer')
  @Idempotent()
  @UseInterceptors(FileInterceptor('file'))
  afterMulter(@UploadedFile() file: StoredFile, @Body() body: Record<string, unknown>) {
    return { seq: ++this.seq, file: describeFile(file), fields: { ...body } };
  }

  @Post('before-multer')
  @UseInterceptors(FileInterceptor('file'))
  @Idempotent()
  beforeMulter(@UploadedFile() file: StoredFile, @Body() body: Record<string, unknown>) {
    return { seq: ++this.seq, file: describeFile(file), fields: { ...body } };
  }

  @Post('after-multer-disk')
  @Idempotent()
  @UseInterceptors(FileInterceptor('file', { dest: uploadDir }))
  afterMulterDisk(@UploadedFile() file: StoredFile, @Body() body: Record<string, unknown>) {
    return { seq: ++this.seq, file: describeFile(file), fields: { ...body } };
  }

  @Post('before-multer-disk')
  @UseInterceptors(FileInterceptor('file', { dest: uploadDir }))
  @Idempotent()
  beforeMulterDisk(@UploadedFile() file: StoredFile, @Body() body: Record<string, unknown>) {
    return { seq: ++this.seq, file: describeFile(file), fields: { ...body } };
  }

  @Post('many-after-multer')
  @Idempotent()
  @UseInterceptors(FilesInterceptor('file'))
  manyAfterMulter(@UploadedFiles() files: StoredFile[], @Body() body: Record<string, unknown>) {
    return { seq: ++this.seq, files: files.map(describeFile), fields: { ...body } };
  }

  @Post('many-before-multer')
  @UseInterceptors(FilesInterceptor('file'))
  @Idempotent()
  manyBeforeMulter(@UploadedFiles() files: StoredFile[], @Body() body: Record<string, unknown>) {
    return { seq: ++this.seq, files: files.map(describeFile), fields: { ...body } };
  }

  @Post('discarded-after-multer')
  @Idempotent()
  @UseInterceptors(FileInterceptor('file', { storage: discardingStorage }))
  discardedAfterMulter(@UploadedFile() file: StoredFile) {
    return { seq: ++this.seq, size: file?.size };
  }

  @Post('discarded-before-multer')
  @UseInterceptors(FileInterceptor('file', { storage: discardingStorage }))
  @Idempotent()
  discardedBeforeMulter(@UploadedFile() file: StoredFile) {
    return { seq: ++this.seq, size: file?.size };
  }

  @Post('small-before-multer')
  @UseInterceptors(FileInterceptor('file'))
  @Idempotent({ maxFingerprintedBodyBytes: 16 * 1024 })
  smallBeforeMulter(@UploadedFile() file: StoredFile) {
    return { seq: ++this.seq, file: describeFile(file) };
  }

  /** No parser reads text/plain on Express: the handler reads the stream itself. */
  @Post('text')
  @Idempotent()
  async text(@Req() request: IncomingMessage) {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    return { seq: ++this.seq, sha256: sha256(Buffer.concat(chunks)) };
  }
}

/** Fastify: the handler parses the multipart body it finds in the request stream. */
@Controller('fastify')
class StreamUploadsController {
  seq = 0;

  @Post('upload')
  @Idempotent()
  async upload(@Req() request: { raw: IncomingMessage; headers: Record<string, string> }) {
    const files = await new Promise<Array<{ field: string; name: string; sha256: string }>>((resolve, reject) => {
      const found: Array<{ field: string; name: string; sha256: string }> = [];
      const parser = busboy({ headers: request.headers });
      parser.on('file', (field, stream, info) => {
        const hash = createHash('sha256');
        stream.on('data', (chunk: Buffer) => hash.update(chunk));
        stream.on('end', () => found.push({ field, name: info.filename ?? '', sha256: hash.digest('hex') }));
      });
      parser.on('close', () => resolve(found));
      parser.on('error', reject);
      request.raw.pipe(parser);
    });
    return { seq: ++this.seq, files };
  }
}

class CapturingLogger implements LoggerService {
  readonly errors: string[] = [];
  log(): void {}
  warn(): void {}
  error(message: unknown): void {
    this.errors.push(String(message instanceof Error ? message.message : message));
  }
}

interface Part {
  name: string;
  value: string | Buffer;
  filename?: string;
  type?: string;
}

const RECEIPT = Buffer.from('%PDF-1.7 receipt \u0000\u00ff binary');
const OTHER_RECEIPT = Buffer.from('%PDF-1.7 receipt \u0000\u00fe binary');

const basicParts = (overrides: { content?: Buffer; filename?: string; type?: string; note?: string } = {}): Part[] => [
  { name: 'note', value: overrides.note ?? 'monthly' },
  {
    name: 'file',
    value: overrides.content ?? RECEIPT,
    filename: overrides.filename ?? 'receipt.pdf',
    type: overrides.type ?? 'application/pdf',
  },
];

/** Sends the parts with fetch's FormData: a fresh boundary on every send, as browsers do. */
async function upload(url: string, key: string, parts: Part[]) {
  const form = new FormData();
  for (const part of parts) {
    if (part.filename === undefined)
      form.append(part.name, typeof part.value === 'string' ? part.value : part.value.toString('latin1'));
    else form.append(part.name, new Blob([part.value], { type: part.type }), part.filename);
  }
  const response = await fetch(url, { method: 'POST', headers: { 'Idempotency-Key': key }, body: form });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, json: () => JSON.parse(text) };
}

/** A multipart body streamed without Content-Length (chunked), so only reading it tells its size. */
async function uploadChunked(url: string, key: string, size: number) {
  const boundary = `b${randomUUID()}`;
  const head = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`;
  const chunks = [Buffer.from(head), Buffer.alloc(size, 0x61), Buffer.from(`\r\n--${boundary}--\r\n`)];
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'Idempotency-Key': key, 'Content-Type': `multipart/form-data; boundary=${boundary}` },
    body: Readable.toWeb(Readable.from(chunks)) as ReadableStream,
    duplex: 'half',
  } as RequestInit);
  const text = await response.text();
  return { status: response.status, headers: response.headers, json: () => JSON.parse(text) };
}

async function listen(app: INestApplication): Promise<string> {
  await app.listen(0, '127.0.0.1');
  return (await app.getUrl()).replace('[::1]', '127.0.0.1');
}

@Module({
  imports: [
    IdempotencyModule.forRoot({
      store: new MemoryIdempotencyStore(),
      scope: ['operation'],
      problemTypeBaseUri: 'https://docs.example.test/problems/',
    }),
  ],
  controllers: [UploadsController],
})
class ExpressUploadsModule {}

afterAll(() => rmSync(uploadDir, { recursive: true, force: true }));

describe('multipart uploads on Express with multer (memory store)', () => {
  let app: INestApplication;
  let url: string;
  const logger = new CapturingLogger();

  beforeAll(async () => {
    app = await NestFactory.create(ExpressUploadsModule, { rawBody: true, logger });
    url = await listen(app);
  });
  afterAll(() => app?.close());

  it('the routes exercise both orders: @Idempotent() above the upload interceptor runs after it, below runs before it', () => {
    const order = (method: keyof UploadsController) =>
      (Reflect.getMetadata(INTERCEPTORS_METADATA, UploadsController.prototype[method]) as unknown[]).map((i) =>
        i === IdempotencyInterceptor ? 'idempotency' : 'upload',
      );
    expect(order('afterMulter')).toEqual(['upload', 'idempotency']);
    expect(order('beforeMulter')).toEqual(['idempotency', 'upload']);
  });

  describe.each([
    ['after multer, memory storage', 'after-multer'],
    ['before multer, memory storage', 'before-multer'],
    ['after multer, disk storage', 'after-multer-disk'],
    ['before multer, disk storage', 'before-multer-disk'],
  ])('FileInterceptor, idempotency %s', (_name, route) => {
    const post = (key: string, parts: Part[]) => upload(`${url}/express/${route}`, key, parts);

    it('rule 15: the same upload again replays, and the handler got the file intact', async () => {
      const key = randomUUID();
      const first = await post(key, basicParts());
      expect(first.status).toBe(201);
      expect(first.json().file).toEqual({
        field: 'file',
        name: 'receipt.pdf',
        type: 'application/pdf',
        size: RECEIPT.length,
        sha256: sha256(RECEIPT),
      });
      expect(first.json().fields).toEqual({ note: 'monthly' });
      const retry = await post(key, basicParts());
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.text).toBe(first.text);
    });

    it.each<[string, Parameters<typeof basicParts>[0]]>([
      ['the file content', { content: OTHER_RECEIPT }],
      ['the filename', { filename: 'receipt-2.pdf' }],
      ['the file part content type', { type: 'application/octet-stream' }],
      ['a text field', { note: 'yearly' }],
    ])('rule 15: two uploads that differ only in %s under one key give 422', async (_what, change) => {
      const key = randomUUID();
      const first = await post(key, basicParts());
      expect(first.status).toBe(201);
      const other = await post(key, basicParts(change));
      expect(other.status).toBe(422);
      expect(other.json()).toMatchObject({ code: 'idempotency_key_reused' });
    });
  });

  describe.each([
    ['after multer', 'many-after-multer'],
    ['before multer', 'many-before-multer'],
  ])('FilesInterceptor, idempotency %s', (_name, route) => {
    const parts = (second: Buffer): Part[] => [
      { name: 'file', value: RECEIPT, filename: 'a.pdf', type: 'application/pdf' },
      { name: 'file', value: second, filename: 'b.pdf', type: 'application/pdf' },
    ];
    const post = (key: string, second: Buffer) => upload(`${url}/express/${route}`, key, parts(second));

    it('rule 15: the same files again replay; a second file that differs gives 422', async () => {
      const key = randomUUID();
      const first = await post(key, RECEIPT);
      expect(first.status).toBe(201);
      expect(first.json().files.map((file: { sha256: string }) => file.sha256)).toEqual([
        sha256(RECEIPT),
        sha256(RECEIPT),
      ]);
      expect((await post(key, RECEIPT)).headers.get('idempotent-replayed')).toBe('true');
      expect((await post(key, OTHER_RECEIPT)).status).toBe(422);
    });
  });

  it('rule 15: a storage engine that keeps the file out of sight fails loudly when multer runs first, and the handler never runs', async () => {
    const before = app.get(UploadsController).seq;
    const res = await upload(`${url}/express/discarded-after-multer`, randomUUID(), basicParts());
    expect(res.status).toBe(500);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    expect(app.get(UploadsController).seq).toBe(before);
    expect(
      logger.errors.some((message) =>
        /POST \/express\/discarded-after-multer: the request body cannot be fingerprinted/.test(message),
      ),
    ).toBe(true);
  });

  it('rule 15: with the same storage engine, idempotency before multer reads the body itself: 422 on another file, replay on the same', async () => {
    const key = randomUUID();
    const post = (content: Buffer) => upload(`${url}/express/discarded-before-multer`, key, basicParts({ content }));
    const first = await post(RECEIPT);
    expect(first.status).toBe(201);
    expect(first.json().size).toBe(RECEIPT.length);
    expect((await post(OTHER_RECEIPT)).status).toBe(422);
    expect((await post(RECEIPT)).headers.get('idempotent-replayed')).toBe('true');
  });

  it('rule 15: a streamed body larger than maxFingerprintedBodyBytes is a 413 before anything runs', async () => {
    const before = app.get(UploadsController).seq;
    const res = await uploadChunked(`${url}/express/small-before-multer`, randomUUID(), 64 * 1024);
    expect(res.status).toBe(413);
    expect(res.json()).toMatchObject({ code: 'idempotency_request_too_large', maxBytes: 16 * 1024 });
    expect(app.get(UploadsController).seq).toBe(before);
    const small = await uploadChunked(`${url}/express/small-before-multer`, randomUUID(), 1024);
    expect(small.status).toBe(201);
    expect(small.json().file.sha256).toBe(sha256(Buffer.alloc(1024, 0x61)));
  });

  it('rule 15: a body no parser reads (text/plain) is fingerprinted from its bytes, and the handler still reads it', async () => {
    const key = randomUUID();
    const first = await send(url, '/express/text', { key, body: 'pay 100 to alice', contentType: 'text/plain' });
    expect(first.status).toBe(201);
    expect(first.json().sha256).toBe(sha256(Buffer.from('pay 100 to alice')));
    expect(
      (await send(url, '/express/text', { key, body: 'pay 900 to mallory', contentType: 'text/plain' })).status,
    ).toBe(422);
    expect(
      (await send(url, '/express/text', { key, body: 'pay 100 to alice', contentType: 'text/plain' })).headers.get(
        'idempotent-replayed',
      ),
    ).toBe('true');
  });
});

/**
 * `@fastify/multipart` is not installed here (the upload interceptors of
 * `@nestjs/platform-fastify/multipart` need it), so these routes take multipart bodies through a
 * content-type parser of the application's own: one that leaves the stream to the handler, as
 * `@fastify/multipart` does, and one that turns the body into an object and keeps no bytes.
 */
describe.each([
  ['leaves the stream to the handler', false],
  ['parses the body into an object without keeping its bytes', true],
])('multipart uploads on Fastify with a content-type parser that %s (memory store)', (_name, consumes) => {
  let app: INestApplication;
  let url: string;
  const logger = new CapturingLogger();

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), scope: ['operation'] })],
      controllers: [StreamUploadsController],
    })
    class FastifyUploadsModule {}
    app = await NestFactory.create(FastifyUploadsModule, new FastifyAdapter(), { rawBody: true, logger });
    const fastify = app.getHttpAdapter().getInstance();
    fastify.addContentTypeParser(
      'multipart/form-data',
      (_request: unknown, payload: IncomingMessage, done: (error: Error | null, body?: unknown) => void) => {
        if (!consumes) return done(null);
        let size = 0;
        payload.on('data', (chunk: Buffer) => (size += chunk.length));
        payload.on('end', () => done(null, { size }));
      },
    );
    url = await listen(app);
  });
  afterAll(() => app?.close());

  const post = (key: string, content: Buffer) => upload(`${url}/fastify/upload`, key, basicParts({ content }));

  if (!consumes) {
    it('rule 15: the body is read, fingerprinted and put back: 422 on another file, replay on the same, and the handler reads the whole upload', async () => {
      const key = randomUUID();
      const first = await post(key, RECEIPT);
      expect(first.status).toBe(201);
      expect(first.json().files).toEqual([{ field: 'file', name: 'receipt.pdf', sha256: sha256(RECEIPT) }]);
      expect((await post(key, OTHER_RECEIPT)).status).toBe(422);
      const retry = await post(key, RECEIPT);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.text).toBe(first.text);
    });
  } else {
    it('rule 15: a body the fingerprint cannot see fails loudly, never fingerprinted in part, and the handler never runs', async () => {
      const before = app.get(StreamUploadsController).seq;
      const res = await post(randomUUID(), RECEIPT);
      expect(res.status).toBe(500);
      expect(app.get(StreamUploadsController).seq).toBe(before);
      expect(
        logger.errors.some((message) =>
          /POST \/fastify\/upload: the request body cannot be fingerprinted/.test(message),
        ),
      ).toBe(true);
    });
  }
});
