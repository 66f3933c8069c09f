import { AsyncLocalStorage } from 'node:async_hooks';
import type { HandlerOutcome } from '../engine/idempotency-engine.types.js';
import type { CapturedResponse } from './response-capture.js';

/**
 * Marks the handler's own asynchronous flow (the handler, its pipes and param decorators, the
 * interceptors inside `@Idempotent()`), so a response written from inside it can be told from one
 * written by an outer layer (a timeout interceptor, a gateway filter) while the handler still runs.
 */
const handlerFlow = new AsyncLocalStorage<object>();

/**
 * Claimed requests whose handler flow may still write. While there are none, the storage is
 * disabled: before Node 24 it is built on async hooks, which, once enabled, cost every promise
 * of the process something (replays and unprotected routes included; docs/performance.md).
 */
let openFlows = 0;

/** How a write to the response relates to the handler (docs/contract.md B.7 rule 17a). */
export type WriteOrigin =
  /** The handler's own answer: written from its flow, or, where Nest renders nothing, from a callback it handed the response to. */
  | 'handler'
  /** Written by an outer layer before the handler settled: not the handler's outcome. */
  | 'early'
  /** Written after the handler settled: the route's rendering of its outcome, unless an outer layer changed it. */
  | 'after';

/** Why a wait for an answer ended without one. */
type NoAnswer = undefined;

/**
 * What one claimed request's handler did and what was written to its response, in order, so
 * the record follows events (the handler's settlement, the writes, the socket closing, the outer
 * pipeline dropping the request), never a timer, whatever answers the client first.
 */
export class HandlerSettlement {
  private readonly flowToken = {};
  private outcome?: HandlerOutcome;
  private answeredEarlyFlag = false;
  private ownWrite?: CapturedResponse;
  private readonly ownWriteWaiters: ((captured: CapturedResponse | NoAnswer) => void)[] = [];
  private laterWrite?: CapturedResponse;
  private readonly laterWriteWaiters: ((captured: CapturedResponse | NoAnswer) => void)[] = [];
  private closed = false;
  private outerDropped = false;
  private superseded = false;
  private flowOpen = false;
  private handlerOver = false;

  constructor(
    /**
     * The handler answers through the response and Nest renders nothing of a success (`@Res()` or
     * `@Next()` without passthrough): a write that no outer layer can have made is its answer.
     */
    private readonly handlerAnswers: boolean,
  ) {}

  /** Runs the handler; writes made from inside its flow count as the handler's own, on every route. */
  runHandler<T>(handler: () => Promise<T>): Promise<T> {
    if (!this.flowOpen) {
      this.flowOpen = true;
      openFlows += 1;
    }
    return handlerFlow.run(this.flowToken, handler);
  }

  /** True when called from inside this request's handler flow (an interceptor bound inside it). */
  get inHandlerFlow(): boolean {
    return handlerFlow.getStore() === this.flowToken;
  }

  /** The request's record is settled: what its handler writes from now on decides nothing. */
  end(): void {
    this.wakeAll();
    if (!this.flowOpen) return;
    this.flowOpen = false;
    openFlows -= 1;
    if (openFlows === 0) handlerFlow.disable();
  }

  /** The handler settled: from now on a write is the route's rendering of this outcome. */
  settle(outcome: HandlerOutcome): void {
    this.outcome ??= outcome;
  }

  /**
   * The handler's run is over, settled or failed to start: whoever waits for a write of the
   * handler's before that (`ownWriteBeforeSettlement`) gets none.
   */
  handlerDone(): void {
    this.handlerOver = true;
    for (const waiter of this.ownWriteWaiters.splice(0)) waiter(undefined);
  }

  get settled(): HandlerOutcome | undefined {
    return this.outcome;
  }

  get answeredEarly(): boolean {
    return this.answeredEarlyFlag;
  }

  get handlerResponse(): CapturedResponse | undefined {
    return this.ownWrite;
  }

  /** Classifies a completed write and remembers it. */
  written(captured: CapturedResponse): WriteOrigin {
    if (handlerFlow.getStore() === this.flowToken || this.answeredByHandlerCallback()) {
      this.ownWrite ??= captured;
      for (const waiter of this.ownWriteWaiters.splice(0)) waiter(captured);
      // Landing after the handler settled (a Fastify onSend hook that awaits), it is also the
      // answer a wait for the rendering ends with: the event, not answerTimeoutMs, decides.
      if (this.outcome) for (const waiter of this.laterWriteWaiters.splice(0)) waiter(captured);
      return 'handler';
    }
    if (!this.outcome) {
      this.answeredEarlyFlag = true;
      // No write of the handler's can reach the client now, and no rendering will follow.
      this.wakeAll();
      return 'early';
    }
    this.laterWrite ??= captured;
    for (const waiter of this.laterWriteWaiters.splice(0)) waiter(captured);
    return 'after';
  }

  /**
   * On a route where Nest renders nothing of a success, a write from outside the handler's flow
   * (an EventEmitter or client created at startup calling back) is the handler's, unless an outer
   * layer has dropped the request (a timeout that answered) or the handler failed (then Nest's
   * filters render the failure).
   */
  private answeredByHandlerCallback(): boolean {
    return this.handlerAnswers && !this.outerDropped && (this.outcome === undefined || this.outcome.ok);
  }

  /** The client went away: no write will reach it (a handler may still answer into the void). */
  close(): void {
    this.closed = true;
    for (const waiter of this.laterWriteWaiters.splice(0)) waiter(undefined);
  }

  get clientGone(): boolean {
    return this.closed;
  }

  /**
   * The outer pipeline unsubscribed before the handler's outcome was handed to it: an outer layer
   * answered on its own (RxJS `timeout()` drops its source before it errors), or the client left.
   */
  dropped(): void {
    if (this.closed) return;
    this.outerDropped = true;
  }

  /**
   * The request was subscribed again (an outer `retry()`): the outcome handed out was consumed by
   * the layer that retries, so no rendering of it will come through this attempt.
   */
  supersede(): void {
    this.superseded = true;
    for (const waiter of this.laterWriteWaiters.splice(0)) waiter(undefined);
  }

  /**
   * The handler's own write if it makes one before it settles; undefined once it settled without
   * one (or the record was settled, or an outer layer answered first).
   */
  ownWriteBeforeSettlement(): Promise<CapturedResponse | NoAnswer> {
    if (this.ownWrite || this.handlerOver || this.answeredEarlyFlag) return Promise.resolve(this.ownWrite);
    return new Promise((resolve) => this.ownWriteWaiters.push(resolve));
  }

  /**
   * The handler's own answer on a route where it answers through the response, however late; or
   * undefined when none can come (an outer layer answered first, the record was settled) or none
   * came within `limitMs` (the route's `answerTimeoutMs`).
   */
  handlerAnswer(limitMs: number): Promise<CapturedResponse | NoAnswer> {
    if (this.ownWrite) return Promise.resolve(this.ownWrite);
    if (this.answeredEarlyFlag) return Promise.resolve(undefined);
    return bounded(limitMs, (done) => this.ownWriteWaiters.push(done));
  }

  /**
   * The first write after the handler settled, or undefined when none can be expected (an outer
   * layer already answered, the client left, an outer `retry()` took the outcome) or none came
   * within `limitMs` (the route's `answerTimeoutMs`).
   */
  writeAfterSettlement(limitMs: number): Promise<CapturedResponse | NoAnswer> {
    if (this.laterWrite) return Promise.resolve(this.laterWrite);
    if (this.answeredEarlyFlag || this.closed || this.superseded) return Promise.resolve(undefined);
    return bounded(limitMs, (done) => this.laterWriteWaiters.push(done));
  }

  private wakeAll(): void {
    for (const waiter of this.ownWriteWaiters.splice(0)) waiter(undefined);
    for (const waiter of this.laterWriteWaiters.splice(0)) waiter(undefined);
  }
}

/** Waits for `register`'s callback, or `limitMs`, whichever comes first. */
function bounded(
  limitMs: number,
  register: (done: (captured: CapturedResponse | NoAnswer) => void) => void,
): Promise<CapturedResponse | NoAnswer> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => done(undefined), limitMs);
    timer.unref();
    const done = (captured: CapturedResponse | NoAnswer) => {
      clearTimeout(timer);
      resolve(captured);
    };
    register(done);
  });
}
