import type { Redis } from 'ioredis';

/**
 * Holds a connection's socket writes until the end of the current event-loop iteration, so the
 * commands that several requests send while one batch of I/O events is handled leave in one
 * `writev` instead of one system call each (on a loaded server a system call costs more than
 * the rest of a claim on the client). The delay is at most the rest of that iteration.
 *
 * ioredis's `enableAutoPipelining` batches only the commands of one tick, which at an HTTP
 * server's one or two commands per tick costs more CPU than it saves; this batches across the
 * iteration's ticks and costs one `cork()` per iteration.
 *
 * @returns a function to call before each command.
 * @internal
 */
export function coalescingWritesOf(client: Redis): () => void {
  let held = false;
  return () => {
    if (held || client.status !== 'ready') return;
    const stream = client.stream;
    held = true;
    stream.cork();
    setImmediate(() => {
      held = false;
      stream.uncork();
    });
  };
}
