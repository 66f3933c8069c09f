/**
 * How the body enters the fingerprint: read by media type essence (JSON, form, multipart, raw
 * bytes, or the parsed body when the bytes are gone), then written in its tagged form.
 */
import { isUtf8 } from 'node:buffer';
import { createHash } from 'node:crypto';
import type { CanonicalEncoder } from './canonical-encoder.js';
import { canonicalizeJson } from './canonical-json.js';
import type { FingerprintInput, JsonFingerprintMode, ParsedRequestBody } from './fingerprint-input.js';
import { readMultipart, type MultipartPart } from './multipart-parts.js';
import { readUrlencoded, type UrlencodedPair } from './urlencoded-pairs.js';

/** The body as it enters the fingerprint; `kind` is written first, so the forms never collide. */
type BodyView =
  | { kind: 'raw'; digest: Buffer }
  | { kind: 'json'; canonical: string }
  | { kind: 'form'; pairs: UrlencodedPair[] }
  | { kind: 'multipart'; parts: MultipartPart[] }
  | { kind: 'parsed'; body: ParsedRequestBody };

export async function readBody(
  mediaType: string,
  contentType: string,
  { body, parsedBody }: FingerprintInput,
  mode: JsonFingerprintMode,
): Promise<BodyView> {
  if (body === undefined || body.length === 0) {
    return parsedBody === undefined ? { kind: 'raw', digest: EMPTY_SHA256 } : { kind: 'parsed', body: parsedBody };
  }
  if (isJsonMediaType(mediaType)) {
    if (mode !== 'raw-bytes') {
      const canonical = tryCanonicalJson(body, mode);
      if (canonical !== undefined) return { kind: 'json', canonical };
    }
  } else if (mediaType === 'application/x-www-form-urlencoded') {
    const pairs = readUrlencoded(body);
    if (pairs !== undefined) return { kind: 'form', pairs };
  } else if (mediaType === 'multipart/form-data') {
    const parts = await readMultipart(contentType, body);
    if (parts !== undefined) return { kind: 'multipart', parts };
  }
  return { kind: 'raw', digest: createHash('sha256').update(body).digest() };
}

const EMPTY_SHA256 = createHash('sha256').digest();

export function writeBody(out: CanonicalEncoder, body: BodyView): void {
  out.text(body.kind);
  switch (body.kind) {
    case 'raw':
      out.bytes(body.digest);
      break;
    case 'json':
      out.text(body.canonical);
      break;
    case 'form':
      out.urlencodedPairs(body.pairs);
      break;
    case 'multipart':
      out.count(body.parts.length);
      for (const part of body.parts) {
        out.text(part.kind);
        out.optionalText(part.name);
        out.optionalText(part.filename);
        out.text(part.mimeType.toLowerCase());
        out.text(part.encoding.toLowerCase());
        out.bytes(part.digest);
      }
      break;
    case 'parsed': {
      out.value(body.body.fields);
      const files = body.body.files ?? [];
      out.count(files.length);
      for (const file of files) {
        out.text(file.field);
        out.optionalText(file.filename);
        out.optionalText(file.mimeType?.toLowerCase());
        out.optionalText(file.encoding?.toLowerCase());
        out.bytes(file.sha256);
      }
      break;
    }
  }
}

export function mediaTypeEssence(contentType: string | undefined): string {
  if (contentType === undefined) return '';
  const semicolon = contentType.indexOf(';');
  return trimOws(semicolon < 0 ? contentType : contentType.slice(0, semicolon)).toLowerCase();
}

function isJsonMediaType(essence: string): boolean {
  return essence === 'application/json' || (essence.endsWith('+json') && essence.indexOf('/') > 0);
}

function trimOws(value: string): string {
  let start = 0;
  let end = value.length;
  while (start < end && (value.charCodeAt(start) === 0x20 || value.charCodeAt(start) === 0x09)) start++;
  while (end > start && (value.charCodeAt(end - 1) === 0x20 || value.charCodeAt(end - 1) === 0x09)) end--;
  return value.slice(start, end);
}

function tryCanonicalJson(body: Buffer, mode: 'lossless' | 'jcs'): string | undefined {
  if (!isUtf8(body)) return undefined;
  try {
    return canonicalizeJson(body.toString('utf8'), mode);
  } catch (error) {
    if (error instanceof SyntaxError) return undefined;
    throw error;
  }
}
