import { randomUUID } from 'node:crypto';
import {
  IdempotentRequestError,
  RetryBudget,
  withIdempotency,
  type IdempotentClientOptions,
} from 'nestjs-idempotency/client';
import { problem } from '../support/http/scripted-server.js';
import { scriptedServerSuite } from '../support/http/scripted-server-suite.js';

/**
 * `withIdempotency(fetch)` against a bare node:http server that answers as each test scripts
 * it (docs/client.md): which answers are retried and which are not, the same key on every
 * attempt, `Retry-After`, the backoff, `maxAttempts`, the deadline, an abort and the retry
 * budget. Waits go through an injected clock: nothing here waits for real or asserts a duration.
 */
describe('withIdempotency(fetch) against a bare HTTP server', () => {
  const suite = scriptedServerSuite();
  const { keysSent } = suite;
  const client = (options: IdempotentClientOptions = {}) => withIdempotency(fetch, suite.options(options));
  const post = (call: ReturnType<typeof client>, init: Parameters<ReturnType<typeof client>>[1] = {}) =>
    call(`${suite.server.url}/charges`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ amountCents: 1200 }),
      ...init,
    });

  it.each([408, 429, 502, 503, 504])(
    'retries a %i with the same key and the same body, and returns the answer that follows',
    async (status) => {
      suite.server.script({ status }, { status: 201, body: { id: 'ch_1' } });
      const res = await post(client());
      expect(res.status).toBe(201);
      expect(await res.json()).toEqual({ id: 'ch_1' });
      expect(res.idempotency).toMatchObject({ attempts: 2, replayed: false, stoppedBy: 'final-answer' });
      expect(suite.server.received).toHaveLength(2);
      const [first, second] = keysSent();
      expect(first).toMatch(/^[0-9a-f-]{36}$/);
      expect(second).toBe(first);
      expect(res.idempotency.key).toBe(first);
      expect(suite.server.received.map((r) => r.body)).toEqual([
        JSON.stringify({ amountCents: 1200 }),
        JSON.stringify({ amountCents: 1200 }),
      ]);
    },
  );

  it.each([
    ['400', problem(400, 'idempotency-key-invalid')],
    ['401', { status: 401 }],
    ['403', { status: 403 }],
    ['404', { status: 404 }],
    ['422 key reused', problem(422, 'idempotency-key-reused')],
    ['409 replay unavailable', problem(409, 'idempotency-replay-unavailable')],
    ['409 without a problem body', { status: 409, body: { error: 'conflict' } }],
    ['500', { status: 500 }],
    ['201', { status: 201, body: { id: 'ch_1' } }],
  ] as const)('never retries a %s: one attempt, its answer returned', async (_name, answer) => {
    suite.server.script(answer, { status: 201 });
    const res = await post(client());
    expect(res.status).toBe((answer as { status: number }).status);
    expect(res.idempotency).toMatchObject({ attempts: 1, stoppedBy: 'final-answer' });
    expect(suite.server.received).toHaveLength(1);
  });

  it('retries a 409 whose problem type ends in idempotency-request-in-progress, after its Retry-After', async () => {
    suite.server.script(problem(409, 'idempotency-request-in-progress', { 'Retry-After': '2' }), {
      status: 201,
      headers: { 'Idempotent-Replayed': 'true' },
      body: { id: 'ch_1' },
    });
    const res = await post(client());
    expect(res.status).toBe(201);
    expect(res.idempotency).toMatchObject({ attempts: 2, replayed: true });
    expect(suite.time.waits).toEqual([2000]);
    expect(new Set(keysSent()).size).toBe(1);
  });

  it("retries another server's in-progress 409 when the isInProgress predicate recognises it", async () => {
    const busy = { status: 409, body: { error: { code: 'request_in_flight' } } };
    const isInProgress = (answer: { problem: unknown }) =>
      (answer.problem as { error?: { code?: string } }).error?.code === 'request_in_flight';
    suite.server.script(busy, { status: 200 });
    expect((await post(client({ isInProgress }))).idempotency.attempts).toBe(2);
    suite.server.script(busy, { status: 200 });
    expect((await post(client())).status).toBe(409);
    expect(suite.server.received).toHaveLength(1);
  });

  it('retries a connection cut before any response, with the same key', async () => {
    suite.server.script('drop', { status: 201, body: { id: 'ch_1' } });
    const res = await post(client());
    expect(res.status).toBe(201);
    expect(res.idempotency.attempts).toBe(2);
    expect(suite.server.received).toHaveLength(2);
    expect(keysSent()[1]).toBe(keysSent()[0]);
  });

  it('sends a stream body again, byte for byte, on a retry', async () => {
    suite.server.script({ status: 503 }, { status: 201 });
    const payload = JSON.stringify({ amountCents: 999 });
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(payload));
        controller.close();
      },
    });
    const res = await post(client(), { body });
    expect(res.status).toBe(201);
    expect(suite.server.received.map((r) => r.body)).toEqual([payload, payload]);
  });

  it('uses the caller’s key (idempotencyKey, or an Idempotency-Key header already set) on every attempt', async () => {
    const key = randomUUID();
    suite.server.script({ status: 503 }, { status: 201 });
    const res = await post(client(), { idempotencyKey: key });
    expect(keysSent()).toEqual([key, key]);
    expect(res.idempotency).toMatchObject({ key, keySource: 'explicit' });

    suite.server.script({ status: 503 }, { status: 201 });
    await post(client(), { headers: { 'Content-Type': 'application/json', 'Idempotency-Key': 'order-42' } });
    expect(keysSent()).toEqual(['order-42', 'order-42']);
  });

  it('gives each call of its own a new random key', async () => {
    suite.server.script({ status: 201 });
    const call = client();
    const first = await post(call);
    const second = await post(call);
    expect(first.idempotency.keySource).toBe('random');
    expect(second.idempotency.key).not.toBe(first.idempotency.key);
    expect(keysSent()).toEqual([first.idempotency.key, second.idempotency.key]);
  });

  it('honours Retry-After as an HTTP-date, and backs off with full jitter without one', async () => {
    const at = new Date(suite.time.now() + 3000).toUTCString();
    suite.server.script(
      { status: 503, headers: { 'Retry-After': at } },
      { status: 503 },
      { status: 503 },
      { status: 201 },
    );
    const res = await post(client({ random: () => 0.75, baseDelayMs: 400, maxDelayMs: 1000 }));
    expect(res.idempotency.attempts).toBe(4);
    // The date, then random × min(max, base × 2^(n-1)) for retries 2 and 3: 0.75 × 800, 0.75 × 1000 (capped).
    expect(suite.time.waits).toEqual([3000, 600, 750]);
  });

  it('returns the answer without retrying when Retry-After asks for more than maxRetryAfterMs', async () => {
    suite.server.script({ status: 503, headers: { 'Retry-After': '120' } }, { status: 201 });
    const res = await post(client({ maxRetryAfterMs: 60_000 }));
    expect(res.status).toBe(503);
    expect(res.idempotency).toMatchObject({ attempts: 1, stoppedBy: 'retry-after-too-long' });
    expect(suite.server.received).toHaveLength(1);
  });

  it('makes maxAttempts attempts in all (4 by default), then returns the last answer', async () => {
    suite.server.script({ status: 503 });
    const res = await post(client());
    expect(res.status).toBe(503);
    expect(res.idempotency).toMatchObject({ attempts: 4, stoppedBy: 'max-attempts' });
    expect(suite.server.received).toHaveLength(4);
    expect(new Set(keysSent()).size).toBe(1);
  });

  it('throws IdempotentRequestError with the key and the last network error when no attempt got an answer', async () => {
    suite.server.script('drop');
    const error = (await post(client({ maxAttempts: 3 })).catch((e: unknown) => e)) as IdempotentRequestError;
    expect(error).toBeInstanceOf(IdempotentRequestError);
    expect(error).toMatchObject({ reason: 'max-attempts', attempts: 3, key: keysSent()[0] });
    expect((error.cause as Error).message).toBe('fetch failed');
    expect(suite.server.received).toHaveLength(3);
  });

  it('starts no retry that would wait past the deadline', async () => {
    suite.server.script({ status: 503 });
    // Waits of 0.5 × 400 = 200, then 0.5 × 800 = 400: the second would end past 500 ms.
    const res = await post(client({ deadlineMs: 500, baseDelayMs: 400, maxAttempts: 10 }));
    expect(res.idempotency).toMatchObject({ attempts: 2, stoppedBy: 'deadline' });
    expect(suite.time.waits).toEqual([200]);
    expect(suite.server.received).toHaveLength(2);
  });

  it('aborts an attempt still running at the deadline and says so', async () => {
    suite.server.script('hang');
    const call = withIdempotency(fetch, { deadlineMs: 300, retryBudget: false });
    const error = (await post(call).catch((e: unknown) => e)) as IdempotentRequestError;
    expect(error).toBeInstanceOf(IdempotentRequestError);
    expect(error).toMatchObject({ reason: 'deadline', attempts: 1 });
    expect(suite.server.received).toHaveLength(1);
  });

  it('stops at once when the caller aborts during an attempt, and during a wait', async () => {
    suite.server.script('hang');
    const duringAttempt = new AbortController();
    const pending = post(client(), { signal: duringAttempt.signal }).catch((e: unknown) => e);
    await suite.server.receivedCount(1);
    duringAttempt.abort(new Error('caller gave up'));
    expect(await pending).toEqual(new Error('caller gave up'));
    expect(suite.server.received).toHaveLength(1);

    suite.server.script({ status: 503, headers: { 'Retry-After': '5' } }, { status: 201 });
    const duringWait = new AbortController();
    const abortingSleep = async (ms: number, signal?: AbortSignal) => {
      duringWait.abort(new Error('shutting down'));
      return suite.time.sleep(ms, signal);
    };
    const error = await post(client({ sleep: abortingSleep }), { signal: duringWait.signal }).catch((e: unknown) => e);
    expect(error).toEqual(new Error('shutting down'));
    expect(suite.server.received).toHaveLength(1);
  });

  it('retries within a shared budget: once it is spent, calls make their first attempt only', async () => {
    const budget = new RetryBudget({ capacity: 10, retryCost: 5, successRefund: 1 });
    suite.server.script({ status: 503 });
    const first = await post(client({ retryBudget: budget }));
    expect(first.idempotency).toMatchObject({ attempts: 3, stoppedBy: 'budget' });
    expect(budget.available).toBe(0);
    const second = await post(client({ retryBudget: budget }));
    expect(second.idempotency).toMatchObject({ attempts: 1, stoppedBy: 'budget' });
    expect(suite.server.received).toHaveLength(4);

    // A final answer that needed no retry gives one token back; one after a retry, what the retry took.
    suite.server.script({ status: 201 });
    await post(client({ retryBudget: budget }));
    expect(budget.available).toBe(1);
  });

  it('refunds the tokens of the last retry when the operation ends with a final answer', async () => {
    const budget = new RetryBudget({ capacity: 100, retryCost: 5 });
    suite.server.script({ status: 503 }, { status: 503 }, { status: 201 });
    const res = await post(client({ retryBudget: budget }));
    expect(res.idempotency.attempts).toBe(3);
    expect(budget.available).toBe(95);
  });

  it('passes GET through without a key and retries it (idempotent by HTTP semantics); so PUT and DELETE', async () => {
    for (const method of ['GET', 'PUT', 'DELETE']) {
      suite.server.script({ status: 503 }, { status: 200 });
      const res = await client()(`${suite.server.url}/orders/1`, { method });
      expect(res.status).toBe(200);
      expect(res.idempotency).toMatchObject({ attempts: 2, key: undefined });
      expect(keysSent()).toEqual([undefined, undefined]);
    }
  });

  it('never retries a method that is neither keyed nor idempotent', async () => {
    suite.server.script({ status: 503 }, { status: 201 });
    const res = await post(client({ keyedMethods: ['PATCH'] }));
    expect(res.status).toBe(503);
    expect(res.idempotency).toMatchObject({ attempts: 1, key: undefined, stoppedBy: 'unsafe-method' });
    expect(keysSent()).toEqual([undefined]);

    suite.server.script('drop', { status: 201 });
    // It fails as fetch fails: nothing was retried.
    const error = (await post(client({ keyedMethods: ['PATCH'] })).catch((e: unknown) => e)) as Error;
    expect(error).not.toBeInstanceOf(IdempotentRequestError);
    expect(error.message).toBe('fetch failed');
    expect(suite.server.received).toHaveLength(1);
  });

  it('keys PATCH too, and reads the SF Boolean replay marker', async () => {
    suite.server.script({ status: 200, headers: { 'Idempotent-Replayed': '?1' } });
    const res = await client()(`${suite.server.url}/orders/1`, { method: 'PATCH', body: '{}' });
    expect(res.idempotency).toMatchObject({ replayed: true, keySource: 'random' });
    expect(keysSent()[0]).toBe(res.idempotency.key);
  });
});
