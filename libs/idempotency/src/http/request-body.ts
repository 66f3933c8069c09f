import type { ParsedRequestBody } from './fingerprint/fingerprint.js';
import { digestUploadedFiles, uploadedFilesOf } from './uploaded-files.js';
import { isUnread, readUnreadBody, type RequestStream } from './unread-body.js';

/** The request as Express and Fastify hand it over; only what the body is read from. */
export interface BodyCarrier {
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
  rawBody?: unknown;
  /** Fastify: the Node request under the reply. */
  raw?: unknown;
  file?: unknown;
  files?: unknown;
}

/**
 * What of a request's body the fingerprint sees (docs/contract.md B.4 rule 15):
 * - `raw`: the bytes the platform kept (`request.rawBody`, or a `Buffer` body);
 * - `unread`: the bytes read here, before any other layer read the stream (and put back);
 * - `uploads`: the fields and files an upload interceptor (multer) made of a multipart body;
 * - `parsed`: a JSON, form or text body as the platform parsed it, its bytes not kept: complete
 *   for the handler, but JSON number spelling (`1` vs `1.0`) is lost;
 * - `none`: no body.
 */
export interface VisibleBody {
  source: 'raw' | 'unread' | 'uploads' | 'parsed' | 'none';
  /** The body's bytes (`raw`, `unread`), or bytes standing for a parsed JSON or text body. */
  bytes?: Buffer;
  /** A parsed form body, or an upload interceptor's fields and files. */
  parsed?: ParsedRequestBody;
}

/**
 * The body cannot be seen: another layer read it and left neither its bytes nor a complete
 * parsed form of it. Fingerprinting what is left would let two different requests match.
 */
export class RequestBodyNotVisibleError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = this.constructor.name;
  }
}

const BUFFERED = Symbol('idempotency.bufferedBody');

/**
 * Finds what the fingerprint can see of a request's body, in this order: bytes read earlier
 * for this request; `request.rawBody`; the stream, when nothing has read it yet (the body is
 * read up to `maxBytes` and put back for the layers after); a `Buffer` body; what an upload
 * interceptor left of a multipart body; a string, JSON or form body as the platform parsed it.
 *
 * @throws RequestBodyNotVisibleError when none of these applies to a request that has a body.
 * @throws UnreadBodyTooLargeError when an unread body is larger than `maxBytes`.
 * @throws UploadedFileNotVisibleError when an uploaded file has neither a buffer nor a path.
 */
export async function readVisibleBody(request: BodyCarrier, maxBytes: number): Promise<VisibleBody> {
  const carrier = request as BodyCarrier & { [BUFFERED]?: Buffer };
  if (carrier[BUFFERED]) return { source: 'unread', bytes: carrier[BUFFERED] };
  if (Buffer.isBuffer(request.rawBody)) return { source: 'raw', bytes: request.rawBody };
  const stream = streamOf(request);
  if (stream && isUnread(stream)) {
    const bytes = await readUnreadBody(stream, maxBytes);
    carrier[BUFFERED] = bytes;
    return { source: 'unread', bytes };
  }

  const mediaType = mediaTypeOf(request.headers['content-type']);
  const { body } = request;
  if (Buffer.isBuffer(body)) return { source: 'raw', bytes: body };
  if (mediaType === 'multipart/form-data') return uploadsOf(request);
  if (typeof body === 'string') return { source: 'parsed', bytes: Buffer.from(body) };
  if (body !== undefined && (mediaType === 'application/json' || mediaType.endsWith('+json'))) {
    return { source: 'parsed', bytes: Buffer.from(JSON.stringify(body)) };
  }
  if (body === undefined || body === null) {
    if (!declaresBody(request.headers)) return { source: 'none' };
    throw new RequestBodyNotVisibleError(
      `the ${mediaType || 'untyped'} body was read by another layer, which kept neither its bytes (request.rawBody) nor a parsed body`,
    );
  }
  if (mediaType === 'application/x-www-form-urlencoded') return { source: 'parsed', parsed: { fields: body } };
  throw new RequestBodyNotVisibleError(
    `the ${mediaType || 'untyped'} body was parsed by another layer into an object, and its bytes were not kept (request.rawBody): the fingerprint cannot tell whether that object is all of the body`,
  );
}

async function uploadsOf(request: BodyCarrier): Promise<VisibleBody> {
  const files = uploadedFilesOf(request);
  const { body } = request;
  const fields = body === undefined || body === null ? {} : body;
  if (files === undefined && !isUploadFields(body)) {
    throw new RequestBodyNotVisibleError(
      'the multipart body was read by another layer, which left neither its bytes (request.rawBody) nor the fields and files of an upload interceptor (request.body, request.file, request.files)',
    );
  }
  return { source: 'uploads', parsed: { fields, files: await digestUploadedFiles(files ?? []) } };
}

/** Express's request is the Node stream; Fastify's keeps it in `raw`. */
function streamOf(request: BodyCarrier): RequestStream | undefined {
  const candidate = isStream(request.raw) ? request.raw : request;
  // Only a Node request says when its body has fully arrived (`complete`), which putting the body back relies on.
  return isStream(candidate) && typeof (candidate as RequestStream).complete === 'boolean'
    ? (candidate as RequestStream)
    : undefined;
}

function isStream(value: unknown): value is RequestStream {
  return (
    value !== null &&
    typeof value === 'object' &&
    typeof (value as RequestStream).read === 'function' &&
    typeof (value as RequestStream).unshift === 'function'
  );
}

/** Upload interceptors (multer, Nest's Fastify ones) give the fields an object without a prototype. */
function isUploadFields(value: unknown): boolean {
  return value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === null;
}

function declaresBody(headers: BodyCarrier['headers']): boolean {
  const length = headers['content-length'];
  return headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

function mediaTypeOf(contentType: string | string[] | undefined): string {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  if (value === undefined) return '';
  const semicolon = value.indexOf(';');
  return (semicolon < 0 ? value : value.slice(0, semicolon)).trim().toLowerCase();
}
