import { randomUUID } from 'node:crypto';
import { Module, UnprocessableEntityException, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Queue, Worker, type Job, type JobState } from 'bullmq';
import {
  IdempotencyModule,
  IdempotencyService,
  MemoryIdempotencyStore,
  type IdempotencyStore,
} from 'nestjs-idempotency';
import { idempotentProcessor, isIdempotentJobResultUnavailable } from 'nestjs-idempotency/bullmq';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { sleep } from '../support/timing.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';

interface OrderCreated {
  eventId?: string;
  orderId: string;
}

/** Polls until the job reaches one of `states`; fails with what it saw instead. */
async function waitForState(queue: Queue, id: string, states: JobState[], timeoutMs = 10_000): Promise<Job> {
  const deadline = Date.now() + timeoutMs;
  let state: string = 'unknown';
  while (Date.now() < deadline) {
    state = await queue.getJobState(id);
    if ((states as string[]).includes(state)) return (await queue.getJob(id))!;
    await sleep(25);
  }
  throw new Error(`job ${id} is ${state}, not ${states.join(' or ')}, after ${timeoutMs} ms`);
}

/**
 * `idempotentProcessor()` on a real BullMQ queue and worker, on a throwaway redis-server (the
 * idempotency store on memory, then on the same Redis).
 */
describe.each<[string, (url: string) => IdempotencyStore]>([
  ['memory', () => new MemoryIdempotencyStore()],
  ['redis', (url) => new RedisIdempotencyStore(url, { prefix: 'idem-bullmq' })],
])('idempotentProcessor on BullMQ (%s store)', (_name, makeStore) => {
  let redis: ThrowawayRedis;
  let context: INestApplicationContext;
  let queue: Queue<OrderCreated>;
  let worker: Worker<OrderCreated>;
  const runs = new Map<string, number>();
  const gates = new Map<string, Promise<void>>();
  const failures = new Map<string, Error[]>();
  /** What the handler returns for an event, instead of its usual value. */
  const values = new Map<string, unknown>();
  let processor: ReturnType<typeof idempotentProcessor<Job<OrderCreated>>>;

  beforeAll(async () => {
    redis = await startRedisServer();
    @Module({ imports: [IdempotencyModule.forRoot({ store: makeStore(redis.url), leaseMs: 1500, heartbeatMs: 500 })] })
    class JobsModule {}
    context = await NestFactory.createApplicationContext(JobsModule, { logger: false });
    processor = idempotentProcessor<Job<OrderCreated>>(
      context.get(IdempotencyService),
      { consumer: 'mailer.order-created', key: (job) => job.data.eventId },
      async (job, idem) => {
        const key = job.data.eventId!;
        runs.set(key, (runs.get(key) ?? 0) + 1);
        await gates.get(key);
        const failure = failures.get(key)?.shift();
        if (failure) throw failure;
        if (values.has(key)) return values.get(key);
        return { sent: job.data.orderId, byJob: job.id, derived: idem.derivedKey('smtp') };
      },
    );
    const connection = { host: '127.0.0.1', port: redis.port, maxRetriesPerRequest: null };
    queue = new Queue<OrderCreated>('orders', { connection });
    worker = new Worker<OrderCreated>('orders', processor, { connection, concurrency: 4 });
    worker.on('error', () => undefined);
    await worker.waitUntilReady();
  });
  afterAll(async () => {
    await worker?.close();
    await queue?.close();
    await context?.close();
    await redis?.stop();
  });

  const add = (data: OrderCreated, opts = {}) => queue.add('order.created', data, { jobId: randomUUID(), ...opts });

  it('the same event enqueued twice (two job ids) runs once; both jobs complete with the same value', async () => {
    const eventId = randomUUID();
    const first = await add({ eventId, orderId: 'o-1' });
    const done = await waitForState(queue, first.id!, ['completed']);
    const second = await add({ eventId, orderId: 'o-1' });
    const replayed = await waitForState(queue, second.id!, ['completed']);
    expect(replayed.returnvalue).toEqual(done.returnvalue);
    expect(done.returnvalue).toMatchObject({ sent: 'o-1', byJob: first.id });
    expect(runs.get(eventId)).toBe(1);
  });

  it('a duplicate while the original runs is moved to delayed (no attempt used), then completes with the stored value', async () => {
    const eventId = randomUUID();
    let open!: () => void;
    gates.set(eventId, new Promise<void>((resolve) => (open = resolve)));
    const original = await add({ eventId, orderId: 'o-2' });
    await waitForState(queue, original.id!, ['active']);
    while (runs.get(eventId) !== 1) await sleep(10);
    const duplicate = await add({ eventId, orderId: 'o-2' }, { attempts: 1 });
    const delayed = await waitForState(queue, duplicate.id!, ['delayed']);
    expect(delayed.attemptsMade).toBe(0);
    open();
    const done = await waitForState(queue, original.id!, ['completed']);
    const replayed = await waitForState(queue, duplicate.id!, ['completed']);
    expect(replayed.returnvalue).toEqual(done.returnvalue);
    expect(runs.get(eventId)).toBe(1);
  });

  it("a failure is released: BullMQ's retry runs the handler again", async () => {
    const eventId = randomUUID();
    failures.set(eventId, [new Error('SMTP timeout')]);
    const job = await add({ eventId, orderId: 'o-3' }, { attempts: 3 });
    const done = await waitForState(queue, job.id!, ['completed']);
    expect(done.attemptsMade).toBe(2);
    expect(runs.get(eventId)).toBe(2);
  });

  it('a stored failure (4xx) is final: the retry gets it as an UnrecoverableError without running', async () => {
    const eventId = randomUUID();
    failures.set(eventId, [new UnprocessableEntityException('no such mailbox')]);
    const job = await add({ eventId, orderId: 'o-4' }, { attempts: 5 });
    const failed = await waitForState(queue, job.id!, ['failed']);
    expect(failed.attemptsMade).toBe(2);
    expect(failed.failedReason).toMatch(/replayed-failure/);
    expect(runs.get(eventId)).toBe(1);
  });

  it('a job whose effect happened but whose result cannot be stored completes with a marker and a log line (not failed, nothing to re-enqueue); the same event enqueued again completes the same way without running', async () => {
    const eventId = randomUUID();
    const failedBefore = await queue.getFailedCount();
    values.set(eventId, { sent: 'o-7', totalCents: 1250n });
    const job = await add({ eventId, orderId: 'o-7' }, { attempts: 3 });
    const done = await waitForState(queue, job.id!, ['completed']);
    expect(done.returnvalue).toEqual({
      idempotencyResult: 'unavailable',
      reason: 'result-unencodable',
      detail: expect.stringMatching(/cannot be stored as JSON/),
    });
    expect(isIdempotentJobResultUnavailable(done.returnvalue)).toBe(true);
    expect(done.attemptsMade).toBe(1);
    expect((await queue.getJobLogs(job.id!)).logs).toEqual([
      expect.stringMatching(
        /^mailer\.order-created: completed; its effect happened, but its result is not stored \(result-unencodable\): do not enqueue it again$/,
      ),
    ]);
    const again = await add({ eventId, orderId: 'o-7' }, { attempts: 3 });
    const replayed = await waitForState(queue, again.id!, ['completed']);
    expect(replayed.returnvalue).toMatchObject({ idempotencyResult: 'unavailable', reason: 'replay-unavailable' });
    expect(runs.get(eventId)).toBe(1);
    expect(await queue.getFailedCount()).toBe(failedBefore);
  });

  it('a job without a key fails at once (UnrecoverableError), whatever its attempts', async () => {
    const job = await add({ orderId: 'o-5' }, { attempts: 5 });
    const failed = await waitForState(queue, job.id!, ['failed']);
    expect(failed.attemptsMade).toBe(1);
    expect(failed.failedReason).toMatch(/no idempotency key/);
  });

  it('the same processor runs in-process on a plain job (no queue): the second call replays', async () => {
    const eventId = randomUUID();
    const job = { id: 'local-1', name: 'order.created', data: { eventId, orderId: 'o-6' } } as Job<OrderCreated>;
    const first = await processor(job);
    expect(await processor({ ...job, id: 'local-2' } as Job<OrderCreated>)).toEqual(first);
    expect(runs.get(eventId)).toBe(1);
  });
});
