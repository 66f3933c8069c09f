import { HttpException } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { IdempotencyRecord } from 'nestjs-idempotency';
import { send, type HttpResult } from '../../support/http/send.js';
import { sleep } from '../../support/timing.js';
import { SLOW_MS, type HandlerBehaviour } from './handler-behaviours.js';
import type { LayerBackend } from './layer-backends.js';
import type { CaseTrace, HandlerSettlement } from './layer-probe.js';
import { CLIENT_LEAVES_HEADER, ROUTE, SUCCESS_STATUS, type LayersApp } from './layers.app.js';
import { sendLeavable, type LeavableRequest } from './leavable-request.js';
import { LAYER_HEADER, type OuterLayer } from './outer-layers.js';

/** How long a retry after the handler settled may keep getting 409 in progress while the record is written. */
const SETTLE_GRACE_MS = 5_000;
/** Statuses that are never stored (docs/contract.md B.7 rule 17), besides every 5xx. */
const TRANSIENT_CLIENT_STATUSES = new Set([408, 423, 425, 429]);
const IN_PROGRESS = '409 idempotency_request_in_progress';

/**
 * The handler's true outcome under the default policy (docs/contract.md B.7 rules 17, 17a), from what
 * its first run did: its value with the route's status and the Location it set, or its error as
 * Nest renders it; stored and replayed, or released.
 */
type TrueOutcome =
  { kind: 'stored'; status: number; bodies: unknown[]; location?: string } | { kind: 'released'; status: number };

function trueOutcomeOf(first: HandlerSettlement, layer: OuterLayer): TrueOutcome {
  if (first.ok) {
    return {
      kind: 'stored',
      status: SUCCESS_STATUS,
      bodies: [first.value, ...(layer.successBodies?.(first.value) ?? [])],
      location: first.location,
    };
  }
  const { error } = first;
  const status = error instanceof HttpException ? error.getStatus() : 500;
  if (status >= 500 || TRANSIENT_CLIENT_STATUSES.has(status)) return { kind: 'released', status };
  const response = (error as HttpException).getResponse();
  const body = typeof response === 'string' ? { statusCode: status, message: response } : response;
  return { kind: 'stored', status, bodies: [body, ...(layer.errorBodies?.() ?? [])] };
}

/**
 * What one case showed, in words, so that a failing case says at once where it went wrong (the
 * same shape holds the expectation; the spec compares the two).
 */
export interface CaseSummary {
  /** The handler's first run began (the app did not drop the request). */
  handlerStarted: boolean;
  /** The answers to retries sent while the first run was still running. */
  whileRunning: string[];
  /** The most runs of the handler at one time. */
  concurrentRuns: number;
  /** Runs of the handler by the time its first run settled. */
  runsWhenSettled: number;
  /** The answers to retries sent after the first run settled. */
  retriesAfter: string[];
  /** Runs of the handler at the end of the case. */
  runsAtEnd: number;
  /** The authoritative record of the key at the end. */
  record: string;
  /** Committed business writes of the case. */
  businessWrites: number;
}

export interface CaseResult {
  observed: CaseSummary;
  expected: CaseSummary;
  /** Context for a failure message: what the client of the first request saw. */
  firstAnswer: string;
}

function problemCode(answer: HttpResult): string | undefined {
  if (!answer.headers.get('content-type')?.includes('application/problem+json')) return undefined;
  try {
    return answer.json().code;
  } catch {
    return undefined;
  }
}

function jsonOf(answer: HttpResult): unknown {
  try {
    return answer.json();
  } catch {
    return undefined;
  }
}

function describeAnswer(answer: HttpResult | 'left'): string {
  if (answer === 'left') return 'client left';
  const code = problemCode(answer);
  return `${answer.status}${code ? ` ${code}` : ` ${answer.text.slice(0, 120)}`}`;
}

/** A retry's answer in words: in progress, a replay (of the handler's response or of what else), a fresh run, or something else. */
function describeRetry(answer: HttpResult, outcome: TrueOutcome | undefined, ranIt: boolean): string {
  if (answer.status === 409 && problemCode(answer) === 'idempotency_request_in_progress') return IN_PROGRESS;
  const replayed = answer.headers.get('idempotent-replayed') === 'true';
  if (!replayed) return ranIt ? 'fresh run' : `not replayed, not run: ${describeAnswer(answer)}`;
  if (ranIt) return `replayed, yet the handler ran: ${describeAnswer(answer)}`;
  const body = jsonOf(answer);
  const handlers = outcome?.kind === 'stored' && outcome.bodies.some((candidate) => isDeepStrictEqual(body, candidate));
  let words = `replay ${answer.status} ${handlers ? "with the handler's body" : `with ${describeAnswer(answer)}`}`;
  if (outcome?.kind === 'stored' && outcome.location && answer.headers.get('location') !== outcome.location) {
    words += `, Location ${answer.headers.get('location')}`;
  }
  return words;
}

function describeRecord(record: IdempotencyRecord | undefined): string {
  if (!record || record.state !== 'completed') return 'not completed';
  return `completed ${record.response?.statusCode}${record.response?.bodyOmitted ? ' without a body' : ''}`;
}

/** Resolves with `promise`, or false after `ms`. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | false> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

async function mustWithin<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  const result = await within(
    promise.then((value) => ({ value })),
    ms,
  );
  if (result === false) throw new Error(`waited ${ms} ms for ${what}`);
  return result.value;
}

/**
 * Runs one case of the matrix on `app`: a first request through `layer` to a handler that
 * behaves as `behaviour`, a retry while it runs (two when the layer answers first), retries
 * after it settled; then reads the record and the business writes.
 */
export async function runCase(
  fixture: LayersApp,
  backend: LayerBackend,
  layer: OuterLayer,
  behaviour: HandlerBehaviour,
): Promise<CaseResult> {
  const tag = randomUUID();
  const trace = fixture.probe.trace(tag);
  const leavers: LeavableRequest[] = [];
  try {
    return await playCase(fixture, backend, layer, behaviour, tag, leavers);
  } finally {
    // A case that failed half-way must not leave a handler at its gate or a request held open:
    // the app could not close.
    trace.gate.fire();
    for (const request of leavers) request.leave();
  }
}

async function playCase(
  fixture: LayersApp,
  backend: LayerBackend,
  layer: OuterLayer,
  behaviour: HandlerBehaviour,
  tag: string,
  leavers: LeavableRequest[],
): Promise<CaseResult> {
  const key = randomUUID();
  const body = { tag, behaviour: behaviour.id };
  const trace = fixture.probe.trace(tag);
  const layerHeaders: Record<string, string> = layer.interceptor || layer.filter ? { [LAYER_HEADER]: layer.id } : {};
  const retry = () => send(fixture.url, ROUTE, { key, body, headers: layerHeaders });
  /** Sends a retry and says what it got, knowing whether it ran the handler. */
  const describedRetry = async (outcome?: TrueOutcome): Promise<string> => {
    const runs = trace.runs;
    const answer = await retry();
    return describeRetry(answer, outcome, trace.runs > runs);
  };
  /** The first answer other than 409 in progress: the record is written once the handler has settled, a moment later. */
  const retryOnceWritten = async (outcome: TrueOutcome): Promise<string> => {
    const deadline = Date.now() + SETTLE_GRACE_MS;
    let answer = await describedRetry(outcome);
    while (answer === IN_PROGRESS && Date.now() < deadline) {
      await sleep(25);
      answer = await describedRetry(outcome);
    }
    return answer;
  };

  const leaves =
    layer.client === 'leaves-before-handler' ? 'before' : layer.client === 'leaves-after-handler' ? 'after' : undefined;
  const first = sendLeavable(fixture.url, ROUTE, body, {
    ...layerHeaders,
    'Idempotency-Key': key,
    ...(leaves ? { [CLIENT_LEAVES_HEADER]: leaves } : {}),
  });
  leavers.push(first);
  if (layer.client === 'leaves-before-handler') {
    await mustWithin(trace.arrived.promise, 5_000, 'the first request to reach the app');
    first.leave();
    return playGoneBeforeClaim(backend, trace, tag, { describedRetry, retryOnceWritten }, layer, first);
  }

  const observed: CaseSummary = {
    handlerStarted: (await within(trace.started.promise, 5_000)) !== false,
    whileRunning: [],
    concurrentRuns: 0,
    runsWhenSettled: 0,
    retriesAfter: [],
    runsAtEnd: 0,
    record: 'not completed',
    businessWrites: 0,
  };
  const expected: CaseSummary = { ...observed, handlerStarted: true };
  if (!observed.handlerStarted) {
    first.leave();
    return { observed, expected, firstAnswer: describeAnswer(await first.answer) };
  }

  if (layer.client === 'leaves-during-handler') {
    first.leave();
    await mustWithin(trace.clientGone.promise, 5_000, 'the app to see the client leave');
  }
  observed.whileRunning.push(await describedRetry());
  let firstAnswer: HttpResult | 'left' | undefined;
  if (layer.answersFirst) {
    firstAnswer = await mustWithin(first.answer, 10_000, `the ${layer.id} layer to answer while the handler is held`);
    observed.whileRunning.push(await describedRetry());
  }
  trace.gate.fire();
  await mustWithin(trace.settled.promise, SLOW_MS + 10_000, 'the handler to settle');
  observed.runsWhenSettled = trace.runs;
  if (layer.client === 'leaves-after-handler') first.leave();
  firstAnswer ??= await mustWithin(first.answer, 10_000, 'the first request to end');

  const outcome = trueOutcomeOf(trace.first!, layer);
  observed.retriesAfter.push(await retryOnceWritten(outcome));
  if (outcome.kind === 'stored') observed.retriesAfter.push(await describedRetry(outcome));
  // A released key let that retry run the handler afresh: that run's own outcome is the record's now.
  const last = trueOutcomeOf(trace.settlements.at(-1)!, layer);
  if (outcome.kind === 'released' && last.kind === 'stored') observed.retriesAfter.push(await retryOnceWritten(last));
  observed.concurrentRuns = trace.maxRunning;
  observed.runsAtEnd = trace.runs;
  observed.record = describeRecord(await backend.record(trace.recordId!));
  observed.businessWrites = await backend.writes(tag);

  const stored = outcome.kind === 'stored';
  const replayOf = (settled: TrueOutcome) => `replay ${settled.status} with the handler's body`;
  Object.assign(expected, {
    whileRunning: observed.whileRunning.map(() => IN_PROGRESS),
    concurrentRuns: 1,
    runsWhenSettled: 1,
    retriesAfter: stored
      ? [replayOf(outcome), replayOf(outcome)]
      : ['fresh run', ...(last.kind === 'stored' ? [replayOf(last)] : [])],
    runsAtEnd: stored ? 1 : 2,
    record: last.kind === 'stored' ? `completed ${last.status}` : 'not completed',
    // Each run that succeeded wrote once, and only a success completes with its writes.
    businessWrites: trace.settlements.filter((settlement) => settlement.ok).length,
  });
  return { observed, expected, firstAnswer: describeAnswer(firstAnswer) };
}

/**
 * The client left before the claim was won (docs/contract.md B.7 rule 17a): its request must not
 * run the handler, and its claim is abandoned, so the client's retry is an ordinary first run
 * (409 while the abandoned claim is still being released, never a replay).
 */
async function playGoneBeforeClaim(
  backend: LayerBackend,
  trace: CaseTrace,
  tag: string,
  {
    describedRetry,
    retryOnceWritten,
  }: {
    describedRetry: (outcome?: TrueOutcome) => Promise<string>;
    retryOnceWritten: (outcome: TrueOutcome) => Promise<string>;
  },
  layer: OuterLayer,
  first: LeavableRequest,
): Promise<CaseResult> {
  // The app must have seen this client go before the retry runs (the route watches the retry's response too).
  await mustWithin(trace.clientGone.promise, 5_000, 'the app to see the client leave');
  trace.gate.fire();
  let retried = await describedRetry();
  const deadline = Date.now() + SETTLE_GRACE_MS;
  while (retried === IN_PROGRESS && Date.now() < deadline) {
    await sleep(25);
    retried = await describedRetry();
  }
  await mustWithin(trace.settled.promise, SLOW_MS + 10_000, 'the retry to settle');
  const outcome = trueOutcomeOf(trace.first!, layer);
  const observed: CaseSummary = {
    handlerStarted: trace.runs > 1 || retried !== 'fresh run',
    whileRunning: [],
    concurrentRuns: trace.maxRunning,
    runsWhenSettled: trace.runs,
    retriesAfter: [retried, ...(outcome.kind === 'stored' ? [await retryOnceWritten(outcome)] : [])],
    runsAtEnd: trace.runs,
    record: describeRecord(await backend.record(trace.recordId!)),
    businessWrites: await backend.writes(tag),
  };
  const expected: CaseSummary = {
    handlerStarted: false,
    whileRunning: [],
    concurrentRuns: 1,
    runsWhenSettled: 1,
    retriesAfter: [
      'fresh run',
      ...(outcome.kind === 'stored' ? [`replay ${outcome.status} with the handler's body`] : []),
    ],
    runsAtEnd: 1,
    record: outcome.kind === 'stored' ? `completed ${outcome.status}` : 'not completed',
    businessWrites: trace.first!.ok ? 1 : 0,
  };
  return { observed, expected, firstAnswer: describeAnswer(await first.answer) };
}
