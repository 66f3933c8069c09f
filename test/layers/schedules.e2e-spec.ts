import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import { send, type HttpResult } from '../support/http/send.js';
import { sleep } from '../support/timing.js';
import type { Platform } from './support/layers.app.js';
import { sendLeavable } from './support/leavable-request.js';
import {
  OUTER_TIMEOUT_HEADER,
  startScheduleApp,
  type AnswerMode,
  type ScheduleApp,
  type ScheduleBody,
} from './support/schedule.app.js';

/**
 * Random schedules against the three invariants of docs/contract.md B.7 rule 17a (issue 22): the
 * handler answers sync, async, from a callback in its flow, or from a client made at startup, at a
 * random moment; an outer `timeout()` may answer first; the client may leave; the store is slow by
 * a random latency. For each schedule:
 *  1. at most one run of the handler while its record is live;
 *  2. a business write (a success) ⇔ the record completed with that success;
 *  3. once the handler has answered, a retry gets its true outcome: its 201 or 402 replayed, its
 *     503 released (the retry runs afresh). Where an outer layer answered a `@Res()` route before
 *     the handler wrote anything, nothing of the handler's can be replayed: `replay-unavailable`
 *     (docs/guarantees.md), never another status.
 */
const PLATFORMS: Platform[] = ['express', 'fastify'];

const schedule = fc.record({
  mode: fc.constantFrom<AnswerMode>('sync', 'async', 'callback', 'startup-callback'),
  status: fc.constantFrom<201 | 402 | 503>(201, 402, 503),
  answerMs: fc.integer({ min: 0, max: 300 }),
  outerTimeoutMs: fc.option(fc.integer({ min: 20, max: 400 }), { nil: undefined }),
  clientLeavesMs: fc.option(fc.integer({ min: 0, max: 300 }), { nil: undefined }),
  storeLatencyMs: fc.constantFrom(0, 0, 5, 40),
});
type Schedule = typeof schedule extends fc.Arbitrary<infer T> ? T : never;

const inProgress = (answer: HttpResult) =>
  answer.status === 409 &&
  answer.headers.get('content-type')?.includes('problem') &&
  answer.json().code === 'idempotency_request_in_progress';

function describeAnswer(answer: HttpResult): string {
  let code = '';
  if (answer.headers.get('content-type')?.includes('problem')) code = ` ${answer.json().code}`;
  return `${answer.status} ${answer.headers.get('idempotent-replayed') === 'true' ? 'replay' : 'fresh'}${code}`;
}

/** Plays one schedule; returns what happened and what the invariants require, side by side. */
async function play(fixture: ScheduleApp, plan: Schedule): Promise<{ observed: unknown; expected: unknown }> {
  const tag = randomUUID();
  const key = randomUUID();
  const path = plan.mode === 'sync' || plan.mode === 'async' ? '/schedule/value' : '/schedule/res';
  const body: ScheduleBody = { tag, mode: plan.mode, status: plan.status, answerMs: plan.answerMs };
  const trace = fixture.probe.trace(tag);
  trace.started = () => {
    if (plan.mode === 'startup-callback') setTimeout(() => fixture.probe.emit(tag), plan.answerMs);
  };
  fixture.store.latency.ms = plan.storeLatencyMs;
  const headers: Record<string, string> = { 'Idempotency-Key': key };
  if (plan.outerTimeoutMs !== undefined) headers[OUTER_TIMEOUT_HEADER] = String(plan.outerTimeoutMs);
  const first = sendLeavable(fixture.url, path, body, headers);
  if (plan.clientLeavesMs !== undefined) setTimeout(() => first.leave(), plan.clientLeavesMs);
  await first.answer;
  // Retries until the record is written (409 while the first attempt is live); one may run the
  // handler when the key is free (a release, or a first attempt abandoned before it ran).
  let last: HttpResult | undefined;
  for (let i = 0; i < 500 && (last === undefined || inProgress(last) || trace.running > 0); i++) {
    if (last) await sleep(10);
    last = await send(fixture.url, path, { key, body });
  }
  // One more retry once everything settled: the record's answer.
  const final = describeAnswer(await send(fixture.url, path, { key, body }));
  const truth = trace.answers[0];
  return {
    observed: { maxConcurrentRuns: trace.maxRunning, writes: trace.writes, final, storedRunsOnce: trace.runs },
    expected: {
      maxConcurrentRuns: 1,
      // Committed ⇔ completed: a success wrote once and is what the record replays.
      writes: truth === 201 ? 1 : 0,
      final: truth === 503 ? '503 fresh' : `${truth} replay`,
      storedRunsOnce: truth === 503 ? trace.runs : 1,
    },
  };
}

describe.each(PLATFORMS)('random schedules against the three invariants (%s)', (platform) => {
  let fixture: ScheduleApp;
  beforeAll(async () => {
    fixture = await startScheduleApp(platform);
  });
  afterAll(async () => fixture?.app.close());

  it('holds for every schedule of answer time, outer answer, client leaving and store latency', async () => {
    await fc.assert(
      fc.asyncProperty(schedule, async (plan) => {
        const { observed, expected } = await play(fixture, plan);
        expect(observed).toEqual(expected);
      }),
      { numRuns: 40 },
    );
  });
});
