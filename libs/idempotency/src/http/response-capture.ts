import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

/** What was about to be sent: status, every header, and the body bytes unless they overflowed. */
/** What to send instead of a captured response that must not go out (its transaction rolled back). */
export interface ReplacementResponse {
  statusCode: number;
  headers: Record<string, string>;
  body: Buffer;
}

export interface CapturedResponse {
  statusCode: number;
  headers: OutgoingHttpHeaders;
  /** The body as written, or undefined when it outgrew the limit (then `bodyOmitted`). */
  body?: Buffer;
  bodyOmitted: boolean;
}

type WriteHead = ServerResponse['writeHead'];
type Write = (chunk: unknown, ...rest: unknown[]) => boolean;
type End = (...args: unknown[]) => ServerResponse;

/**
 * Holds back what a response writes (status line, headers, body) until `onEnd` has finished, so
 * the record is stored before the client can see the answer, and the stored bytes are exactly
 * the bytes sent, whichever exception filter or serializer produced them, on Express and Fastify
 * alike (both write to Node's `ServerResponse`).
 *
 * A body that outgrows `limitBytes` is streamed through at once and recorded as omitted.
 */
export class ResponseCapture {
  private headArgs?: Parameters<WriteHead>;
  /**
   * The `writeHead` call already passed on by an overflow. Node keeps headers given to
   * `writeHead` out of `getHeaders()` when nothing was set before (Fastify sends them all that
   * way), so the record would lose `Location` without it.
   */
  private flushedHeadArgs?: Parameters<WriteHead>;
  private chunks: Buffer[] = [];
  private size = 0;
  private overflowed = false;
  private endCalled = false;

  private readonly originalWriteHead: WriteHead;
  private readonly originalWrite: Write;
  private readonly originalEnd: End;

  constructor(
    private readonly raw: ServerResponse,
    private readonly limitBytes: number,
    /** Resolves when the response may go out; a response it returns is sent instead of the captured one. */
    private readonly onEnd: (captured: CapturedResponse) => Promise<ReplacementResponse | void>,
  ) {
    this.originalWriteHead = raw.writeHead;
    this.originalWrite = raw.write as unknown as Write;
    this.originalEnd = raw.end as unknown as End;
    const patched = raw as unknown as Record<'writeHead' | 'write' | 'end', unknown>;
    if ((raw as Held)[CAPTURE] !== undefined) {
      // Captured before (an attempt an outer `retry()` dropped or released): the shared functions
      // pass on to that first capture, so this one wraps whatever is installed with closures of
      // its own, and each capture passes on to the one it wrapped.
      patched.writeHead = (...args: Parameters<WriteHead>) => this.heldWriteHead(args);
      patched.write = (chunk: unknown, encoding?: unknown, callback?: unknown) =>
        this.heldWrite(chunk, encoding, callback);
      patched.end = (chunk?: unknown, encoding?: unknown, callback?: unknown) =>
        this.heldEnd(chunk, encoding, callback);
    } else {
      // Functions shared by every response, not closures made per response: closures installed
      // on the response kept each request's objects alive through V8's young-generation
      // collections (docs/performance.md, "Garbage the library kept alive").
      (raw as Held)[CAPTURE] = this;
      patched.writeHead = heldWriteHead;
      patched.write = heldWrite;
      patched.end = heldEnd;
    }
  }

  /** `writeHead` while held. */
  heldWriteHead(args: Parameters<WriteHead>): ServerResponse {
    // Once ended, the answer is fixed: a later writer (an exception filter, Nest writing a
    // passthrough result) must not change the status or headers of the held response.
    if (!this.endCalled) this.headArgs = args;
    return this.raw;
  }

  /** `write` while held. */
  heldWrite(chunk: unknown, encoding?: unknown, callback?: unknown): boolean {
    this.append(chunk, encoding);
    if (typeof callback === 'function') process.nextTick(callback as () => void);
    else if (typeof encoding === 'function') process.nextTick(encoding as () => void);
    return true;
  }

  /** `end` while held. */
  heldEnd(chunk?: unknown, encoding?: unknown, callback?: unknown): ServerResponse {
    if (typeof chunk === 'function') return this.finish(undefined, undefined, chunk);
    if (typeof encoding === 'function') return this.finish(chunk, undefined, encoding);
    return this.finish(chunk, encoding, callback);
  }

  /** True once the response was ended by whoever wrote it. */
  get ended(): boolean {
    return this.endCalled;
  }

  private append(chunk: unknown, encoding: unknown): void {
    if (chunk === undefined || chunk === null) return;
    const buffer = Buffer.isBuffer(chunk)
      ? chunk
      : chunk instanceof Uint8Array
        ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
        : Buffer.from(String(chunk), typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8');
    if (this.overflowed) {
      this.originalWrite.call(this.raw, buffer);
      return;
    }
    this.chunks.push(buffer);
    this.size += buffer.length;
    if (this.size > this.limitBytes) this.overflow();
  }

  /** Too large to keep: send what we hold and let the rest stream through unrecorded. */
  private overflow(): void {
    this.overflowed = true;
    // Restored first: Node's implicit header write goes through `writeHead`.
    this.restoreHeadAndWrite();
    this.flushHead();
    for (const chunk of this.chunks) this.originalWrite.call(this.raw, chunk);
    this.chunks = [];
  }

  private finish(chunk: unknown, encoding: unknown, callback: unknown): ServerResponse {
    if (this.endCalled) return this.raw;
    this.endCalled = true;
    this.append(chunk, encoding);
    const body = this.overflowed ? undefined : Buffer.concat(this.chunks);
    this.chunks = [];
    const heldStatus = this.raw.statusCode;
    const heldHeaders = this.raw.getHeaders();
    const captured = this.snapshot(heldHeaders, body);
    // While held, the response reads as sent: Nest's exception filter and adapters then leave it
    // alone (`headersSent` on Express, `reply.sent` through `writableEnded` on Fastify).
    readAsSent(this.raw, true);
    const send = (replacement: ReplacementResponse | void) => {
      readAsSent(this.raw, false);
      this.restoreAll();
      if (!this.overflowed) restoreHead(this.raw, heldStatus, heldHeaders);
      if (replacement && !this.overflowed && !this.raw.headersSent) {
        // The representation is replaced; CORS and other cross-cutting headers stay, whether they
        // were set on the response (Express) or handed to writeHead (Fastify).
        const passed = Object.entries(this.headersPassedToWriteHead()).filter(
          ([name]) => !REPRESENTATION_HEADER.test(name),
        );
        this.headArgs = undefined;
        for (const name of this.raw.getHeaderNames()) if (REPRESENTATION_HEADER.test(name)) this.raw.removeHeader(name);
        this.raw.writeHead(replacement.statusCode, {
          ...Object.fromEntries(passed),
          ...replacement.headers,
          'content-length': replacement.body.length,
        });
        this.originalEnd.call(this.raw, replacement.body, callback);
        return;
      }
      if (!this.overflowed) this.flushHead();
      this.originalEnd.call(this.raw, body, callback);
    };
    this.onEnd(captured).then(send, () => send());
    return this.raw;
  }

  /** What was about to be sent; `headers` are the response's own (`getHeaders()`), never changed here. */
  private snapshot(headers: OutgoingHttpHeaders, body: Buffer | undefined): CapturedResponse {
    const head = this.headArgs ?? this.flushedHeadArgs;
    return {
      statusCode: head?.[0] ?? this.raw.statusCode,
      headers: head ? { ...headers, ...this.headersPassedToWriteHead() } : { ...headers },
      body,
      bodyOmitted: this.overflowed,
    };
  }

  /**
   * `writeHead(status, [reason,] headers)`: the headers of the held (or already flushed) call,
   * lower-cased. Node leaves them out of `getHeaders()`, and Fastify passes its headers this way.
   */
  private headersPassedToWriteHead(): OutgoingHttpHeaders {
    const args = this.headArgs ?? this.flushedHeadArgs;
    if (!args) return {};
    const [, second, third] = args as unknown as [number, unknown, unknown];
    return normaliseHeaders(typeof second === 'string' ? third : second);
  }

  private flushHead(): void {
    if (this.headArgs) {
      (this.originalWriteHead as (...args: unknown[]) => unknown).apply(this.raw, this.headArgs);
      this.flushedHeadArgs = this.headArgs;
      this.headArgs = undefined;
    }
  }

  private restoreHeadAndWrite(): void {
    const raw = this.raw as unknown as { writeHead: WriteHead; write: Write };
    raw.writeHead = this.originalWriteHead;
    raw.write = this.originalWrite;
  }

  private restoreAll(): void {
    const raw = this.raw as unknown as { writeHead: WriteHead; write: Write; end: End };
    raw.writeHead = this.originalWriteHead;
    raw.write = this.originalWrite;
    raw.end = this.originalEnd;
  }
}

/** Set on a response while it is held: its `headersSent` and `writableEnded` then read true. */
const HELD_AS_SENT = Symbol('idempotency.heldAsSent');
/** The capture a response's shared `writeHead`, `write` and `end` pass on to. */
const CAPTURE = Symbol('idempotency.responseCapture');
type Held = { [HELD_AS_SENT]?: boolean; [CAPTURE]?: ResponseCapture };

/** The capture of the response the shared functions are called on, as Node's own are. */
function captureOf(response: unknown, method: string): ResponseCapture {
  const capture = (response as Held | undefined)?.[CAPTURE];
  if (!capture) throw new TypeError(`ServerResponse.${method} was called without its response as \`this\``);
  return capture;
}

function heldWriteHead(this: unknown, ...args: Parameters<WriteHead>): ServerResponse {
  return captureOf(this, 'writeHead').heldWriteHead(args);
}

function heldWrite(this: unknown, chunk: unknown, encoding?: unknown, callback?: unknown): boolean {
  return captureOf(this, 'write').heldWrite(chunk, encoding, callback);
}

function heldEnd(this: unknown, chunk?: unknown, encoding?: unknown, callback?: unknown): ServerResponse {
  return captureOf(this, 'end').heldEnd(chunk, encoding, callback);
}

/**
 * One accessor per name, shared by every response: true while held, else what the prototype
 * chain says (Node's own getter, with the response as receiver).
 */
const SENT_WHILE_HELD = Object.fromEntries(
  ['headersSent', 'writableEnded'].map((name) => [
    name,
    {
      configurable: true,
      get(this: Held): unknown {
        if (this[HELD_AS_SENT] === true) return true;
        const prototype = Object.getPrototypeOf(this) as object | null;
        return prototype ? Reflect.get(prototype, name, this) : undefined;
      },
    } satisfies PropertyDescriptor,
  ]),
);

/**
 * Makes `raw` read as sent (`headersSent`, `writableEnded`) while `held`, then as Node says again.
 * Own accessors that stay, shared by every response, and a flag, rather than own values deleted
 * later: a `delete` on Node's response object turns it into a slow dictionary (V8 rolls a shape
 * back only for the last property added), and accessors made per response give each one a map of
 * its own (3 KB and about 5 µs either way; this: under 1 µs).
 */
function readAsSent(raw: ServerResponse, held: boolean): void {
  (raw as unknown as Held)[HELD_AS_SENT] = held;
  if (held) Object.defineProperties(raw, SENT_WHILE_HELD);
}

/** Puts back the status and headers a held response ended with, whatever was set after its end. */
function restoreHead(raw: ServerResponse, statusCode: number, headers: OutgoingHttpHeaders): void {
  if (raw.headersSent) return;
  raw.statusCode = statusCode;
  const names = raw.getHeaderNames();
  // Nothing was set after the end (the usual case): no header is validated and stored again.
  if (names.length === Object.keys(headers).length && names.every((name) => raw.getHeader(name) === headers[name]))
    return;
  for (const name of names) if (!(name in headers)) raw.removeHeader(name);
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) raw.setHeader(name, value);
}

/** Headers that describe the body being replaced, dropped with it. */
const REPRESENTATION_HEADER = /^(content-|etag$|last-modified$|location$|set-cookie$)/i;

/** `writeHead` takes headers as an object or as a flat `[name, value, name, value]` array. */
function normaliseHeaders(value: unknown): OutgoingHttpHeaders {
  if (!value) return {};
  if (Array.isArray(value)) {
    const headers: OutgoingHttpHeaders = {};
    for (let i = 0; i + 1 < value.length; i += 2) headers[String(value[i]).toLowerCase()] = value[i + 1];
    return headers;
  }
  const headers: OutgoingHttpHeaders = {};
  for (const [name, v] of Object.entries(value as OutgoingHttpHeaders)) headers[name.toLowerCase()] = v;
  return headers;
}
