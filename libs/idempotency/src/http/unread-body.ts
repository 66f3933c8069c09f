import type { Readable } from 'node:stream';

/** A request stream as Node's `IncomingMessage` (Express's request, Fastify's `request.raw`) has it. */
export type RequestStream = Readable & { complete?: boolean };

/** The body held more bytes than the fingerprint may buffer; the rest of it is discarded. */
export class UnreadBodyTooLargeError extends Error {
  constructor(readonly maxBytes: number) {
    super(`The request body is larger than ${maxBytes} bytes.`);
    this.name = this.constructor.name;
  }
}

/** Whether nothing has read from the stream yet, so all of its body is still there to read. */
export function isUnread(stream: RequestStream): boolean {
  return !stream.readableEnded && !stream.readableDidRead && stream.readableFlowing !== true && !stream.destroyed;
}

/**
 * Reads the whole body of a stream nothing has read yet, and puts it back, so that the layers
 * after the interceptor (multer's `FileInterceptor`, a handler that pipes the request) read
 * the same bytes as if nobody had been there.
 *
 * The bytes are pulled with `read()` and handed back with `unshift()` in the same tick as the
 * last `read()`: a stream emits `'end'` on the next tick only if its buffer is still empty
 * then, and `unshift()` is allowed until `'end'` has been emitted, so the stream stays
 * readable, with the whole body in its buffer, until its next reader consumes it.
 *
 * @throws UnreadBodyTooLargeError above `maxBytes`; the rest of the body is then discarded.
 */
export function readUnreadBody(stream: RequestStream, maxBytes: number): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (error: Error | undefined, body?: Buffer): void => {
      stream.off('readable', onReadable);
      stream.off('end', onEnd);
      stream.off('error', finish);
      stream.off('close', onClose);
      if (error) reject(error);
      else resolve(body!);
    };
    const onReadable = (): void => {
      for (let chunk = stream.read() as Buffer | null; chunk !== null; chunk = stream.read() as Buffer | null) {
        size += chunk.length;
        if (size > maxBytes) {
          stream.resume();
          finish(new UnreadBodyTooLargeError(maxBytes));
          return;
        }
        chunks.push(chunk);
      }
      if (stream.complete) {
        const body = Buffer.concat(chunks, size);
        if (body.length > 0) stream.unshift(body);
        finish(undefined, body);
      }
    };
    // An empty body ends without a 'readable' event that finds it complete.
    const onEnd = (): void => finish(undefined, Buffer.concat(chunks, size));
    const onClose = (): void => finish(new Error('The client closed the connection before the request body was read.'));
    stream.on('readable', onReadable);
    stream.once('end', onEnd);
    stream.once('error', finish);
    stream.once('close', onClose);
  });
}
