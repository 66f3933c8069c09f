import { deflateRawSync, inflateRawSync } from 'node:zlib';

/**
 * Compression of a completed record's response (headers JSON and body) in the Redis store: a
 * 300-byte JSON order with its `Content-Type`, `Location` and `ETag` takes about 40 % fewer
 * bytes, which brings the record under 500 bytes of Redis memory.
 *
 * Raw DEFLATE with a preset dictionary of what responses of JSON APIs repeat: header names and
 * values and JSON member names. The dictionary is part of the stored format: records written
 * with it can only be read with it, so it must never change (a new one needs a new flag).
 */
const DICTIONARY = Buffer.from(
  [
    '{"cache-control":"no-store","content-language":"en","vary":"Origin","x-powered-by":"Express",',
    '"content-type":"application/problem+json","content-type":"text/plain; charset=utf-8",',
    '"status":"pending","status":"paid","status":"confirmed","status":"failed","currency":"USD","currency":"EUR",',
    '"title":"","detail":"","type":"","message":"","error":"","statusCode":',
    '"quantity":1,"sku":"","name":"","email":"","amount":"amountCents":"unitPriceCents":',
    '"totalCents":"customerId":"tenantId":"orderId":"paymentId":"items":[{"',
    '"createdAt":"","updatedAt":"","id":"',
    '"etag":"W/\\"","location":"/orders/","content-type":"application/json; charset=utf-8"}',
  ].join(''),
  'latin1',
);

/**
 * zlib settings: a 2 KiB window (the dictionary fits) and a small, fast compressor. Most of the
 * cost of a call on a few hundred bytes is setting up the stream, which these make cheaper;
 * they compress a typical response as well as the defaults.
 */
const ZLIB_OPTIONS = { dictionary: DICTIONARY, windowBits: 11, memLevel: 3, level: 4 } as const;
/*
 * Measured for issue 14 (Node 20, a 310-byte order and its 155 bytes of typical Express headers,
 * medians of 7 runs of 20 000 calls on a shared 2-core machine): packResponse 16 µs per call, of
 * which setting up and closing the zlib stream is about 8 µs (7.8 µs to deflate one byte with
 * the dictionary); level 1 (16 µs, +6 bytes), Z_FIXED (18 µs, +18 bytes), Z_HUFFMAN_ONLY
 * (19 µs, +160 bytes) and no dictionary (21-26 µs, +117 bytes) cost as much or more, and pako
 * (pure JavaScript) 43-47 µs. Node offers no documented way to reuse one zlib handle
 * synchronously (its *Sync functions close theirs), so this stays. Unpacking a replay: 7.5 µs.
 */

/**
 * Output buffer sizes: zlib allocates one `chunkSize` buffer per call (16 KiB by default), which
 * for a few hundred bytes is most of the garbage a call makes; one sized to the expected output
 * comes from Node's buffer pool. A larger output still comes out whole, in several chunks.
 */
const MIN_CHUNK_BYTES = 1024;
const MAX_CHUNK_BYTES = 16 * 1024;
const chunkSizeFor = (expectedBytes: number) => Math.min(MAX_CHUNK_BYTES, Math.max(MIN_CHUNK_BYTES, expectedBytes));

/**
 * Headers and body of at most this many bytes are stored as they are (encodeResponse in
 * redis-reply-codec.ts): compressing them costs more CPU per request (a zlib stream set up and
 * closed: 20-25 µs on Node 24) than the memory it saves is worth. A 310-byte JSON order with its
 * typical Express headers in their compact form takes 410 bytes, its record 600 bytes of Redis
 * memory uncompressed (472 compressed).
 */
export const PACK_ABOVE_BYTES = 512;
/** Below this many bytes, compression saves too little to pay for itself. */
const MIN_PACKED_INPUT_BYTES = 128;
/** Length prefix of the headers inside the compressed blob. */
const HEADERS_LENGTH_BYTES = 4;

/** Headers JSON and body bytes of a stored response. */
export interface ResponseParts {
  headers: Buffer;
  body: Buffer;
}

/**
 * The compressed form of a response (`[u32 headers length][headers][body]`, deflated), or
 * undefined when it would not be smaller than the two parts stored as they are.
 */
export function packResponse(headersJson: string, body: Buffer | undefined): Buffer | undefined {
  const headers = Buffer.from(headersJson, 'utf8');
  const bodyBytes = body ?? Buffer.alloc(0);
  const plainBytes = headers.length + bodyBytes.length;
  if (plainBytes < MIN_PACKED_INPUT_BYTES) return undefined;
  const prefix = Buffer.alloc(HEADERS_LENGTH_BYTES);
  prefix.writeUInt32BE(headers.length);
  const packed = deflateRawSync(Buffer.concat([prefix, headers, bodyBytes]), {
    ...ZLIB_OPTIONS,
    chunkSize: chunkSizeFor(plainBytes),
  });
  return packed.length < plainBytes ? packed : undefined;
}

/** Inverse of {@link packResponse}. Throws on a blob it did not write (corrupt, truncated, foreign). */
export function unpackResponse(packed: Buffer): ResponseParts {
  // JSON and headers compress about 3:1.
  const plain = inflateRawSync(packed, { ...ZLIB_OPTIONS, chunkSize: chunkSizeFor(packed.length * 4) });
  if (plain.length < HEADERS_LENGTH_BYTES) throw new RangeError('packed response shorter than its header length');
  const headersEnd = HEADERS_LENGTH_BYTES + plain.readUInt32BE(0);
  if (headersEnd > plain.length) throw new RangeError('packed response with a header length beyond its end');
  return { headers: plain.subarray(HEADERS_LENGTH_BYTES, headersEnd), body: plain.subarray(headersEnd) };
}
