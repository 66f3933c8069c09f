import { AsyncLocalStorage } from 'node:async_hooks';
import type { HandlerOutcome } from '../engine/idempotency-engine.types.js';
import type { CapturedResponse } from './response-capture.js';

/**
 * Marks the handler's own asynchronous flow, so a response written from inside it (a `@Res()`
 * route answering for itself) can be told from one written by an outer layer (a timeout
 * interceptor, a gateway filter) while the handler still runs.
 */
const handlerFlow = new AsyncLocalStorage<object>();

/**
 * Claimed requests whose handler flow may still write. While there are none, the storage is
 * disabled: before Node 24 it is built on async hooks, which, once enabled, cost every promise
 * of the process something (replays, and routes without `@Res()`, included).
 */
let openFlows = 0;

/** How a write to the response relates to the handler (docs/contract.md B.7 rule 17a). */
export type WriteOrigin =
  /** Written from the handler's own flow: its own response (`@Res()` routes). */
  | 'handler'
  /** Written by an outer layer before the handler settled: not the handler's outcome. */
  | 'early'
  /** Written after the handler settled: the route's rendering of its outcome, unless an outer layer changed it. */
  | 'after';

/**
 * What one claimed request's handler did and what was written to its response, in order, so
 * the record can follow the handler's own settlement whatever answers the client first.
 */
export class HandlerSettlement {
  private readonly flowToken = {};
  private outcome?: HandlerOutcome;
  private answeredEarlyFlag = false;
  private ownWrite?: CapturedResponse;
  private readonly ownWriteWaiters: ((captured: CapturedResponse) => void)[] = [];
  private laterWrite?: CapturedResponse;
  private laterWriteWaiter?: (captured: CapturedResponse | undefined) => void;
  private closed = false;
  private flowOpen = false;

  constructor(
    /** Whether the handler can write the response itself (`@Res()` or `@Next()` in its parameters). */
    private readonly handlerWrites: boolean,
  ) {}

  /** Runs the handler; writes made from inside it count as the handler's own. */
  runHandler<T>(handler: () => Promise<T>): Promise<T> {
    if (!this.handlerWrites) return handler();
    if (!this.flowOpen) {
      this.flowOpen = true;
      openFlows += 1;
    }
    return handlerFlow.run(this.flowToken, handler);
  }

  /** The request's record is settled: what its handler writes from now on decides nothing. */
  end(): void {
    if (!this.flowOpen) return;
    this.flowOpen = false;
    openFlows -= 1;
    if (openFlows === 0) handlerFlow.disable();
  }

  /** The handler settled: from now on a write is the route's rendering of this outcome. */
  settle(outcome: HandlerOutcome): void {
    this.outcome ??= outcome;
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
    // From the handler's own flow, before or after it returned (a callback that answers later).
    if (this.handlerWrites && handlerFlow.getStore() === this.flowToken) {
      this.ownWrite ??= captured;
      for (const waiter of this.ownWriteWaiters.splice(0)) waiter(captured);
      return 'handler';
    }
    if (!this.outcome) {
      this.answeredEarlyFlag = true;
      return 'early';
    }
    this.laterWrite ??= captured;
    this.laterWriteWaiter?.(captured);
    return 'after';
  }

  /** The client went away: no write will reach it. */
  close(): void {
    this.closed = true;
    this.laterWriteWaiter?.(undefined);
  }

  /** Resolves with the handler's own write, if it makes one before it settles. */
  handlerWrote(): Promise<CapturedResponse> {
    if (this.ownWrite) return Promise.resolve(this.ownWrite);
    return new Promise((resolve) => this.ownWriteWaiters.push(resolve));
  }

  /**
   * The first write after the handler settled, or undefined when none can be expected (an
   * outer layer already answered, the client left) or none came within `graceMs`.
   */
  writeAfterSettlement(graceMs: number): Promise<CapturedResponse | undefined> {
    if (this.laterWrite) return Promise.resolve(this.laterWrite);
    if (this.answeredEarlyFlag || this.closed) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const timer = setTimeout(() => done(undefined), graceMs);
      timer.unref();
      const done = (captured: CapturedResponse | undefined) => {
        clearTimeout(timer);
        this.laterWriteWaiter = undefined;
        resolve(captured);
      };
      this.laterWriteWaiter = done;
    });
  }
}
