import { Injectable } from '@nestjs/common';
import type { ServerResponse } from 'node:http';

/** What one run of the handler did: its value, or the error it threw. */
export type HandlerSettlement = { ok: true; value: unknown; location?: string } | { ok: false; error: unknown };

/** A promise with its resolver, to signal a moment from the app to the test. */
class Signal {
  readonly promise: Promise<void>;
  fired = false;
  private resolve!: () => void;

  constructor() {
    this.promise = new Promise<void>((resolve) => (this.resolve = resolve));
  }

  fire(): void {
    this.fired = true;
    this.resolve();
  }
}

/** Everything the app reports about the requests of one case (one tag, one key). */
export class CaseTrace {
  /** The first request reached the outermost layer (its body is parsed). */
  readonly arrived = new Signal();
  /** The first run of the handler began. */
  readonly started = new Signal();
  /** The first run of the handler returned or threw. */
  readonly settled = new Signal();
  /** The connection of the first request closed (its client left). */
  readonly clientGone = new Signal();
  /** The first run waits here until the test opens it; later runs pass straight through. */
  readonly gate = new Signal();
  runs = 0;
  running = 0;
  maxRunning = 0;
  /** Business writes of the runs that succeeded, on backends without a business table. */
  effects = 0;
  /** The scoped key id of the record (from the idempotency context of the first run). */
  recordId?: string;
  /** What each run did, in the order they settled. */
  readonly settlements: HandlerSettlement[] = [];

  /** What the first run did. */
  get first(): HandlerSettlement | undefined {
    return this.firstSettlement;
  }
  private firstSettlement?: HandlerSettlement;

  /** Records what a run did. */
  settle(settlement: HandlerSettlement, first: boolean): void {
    this.settlements.push(settlement);
    if (first) this.firstSettlement = settlement;
  }

  /** Resolves `clientGone` once `response`'s connection closes (at once if it has already). */
  watchClient(response: ServerResponse): void {
    if (this.clientGone.fired) return;
    if (response.destroyed || response.socket?.destroyed) this.clientGone.fire();
    else response.once('close', () => this.clientGone.fire());
  }
}

/**
 * The test's window into the app: handlers and layers report the moments of a case here (by the
 * `tag` of its request body), and handlers wait at a gate the test opens.
 */
@Injectable()
export class LayerProbe {
  private readonly traces = new Map<string, CaseTrace>();

  trace(tag: string): CaseTrace {
    let trace = this.traces.get(tag);
    if (!trace) this.traces.set(tag, (trace = new CaseTrace()));
    return trace;
  }
}
