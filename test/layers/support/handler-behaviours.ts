import { HttpException, ServiceUnavailableException } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';

/** How long the slow handler works after its gate opens: longer than the timeout layer's 300 ms. */
export const SLOW_MS = 1000;

/** What a run knows about itself. */
export interface RunInfo {
  tag: string;
  /** 1 for the first run of the case, 2 for the next, ... */
  run: number;
  /** Sets a response header, as a handler with `@Res({ passthrough: true })` does. */
  setHeader(name: string, value: string): void;
}

const thingId = ({ tag, run }: RunInfo) => `thing_${tag.slice(0, 8)}_${run}`;

/**
 * What the handler does: `before` its gate (nothing has answered the client yet), then `act` once
 * the gate opens (on the transactional backend, after its business write): return a value, or
 * throw. Nothing else is declared: the suite derives each case's expected outcome from what the
 * first run actually did (docs/contract.md B.7 rule 17), so a new behaviour needs no expectations.
 */
export interface HandlerBehaviour {
  /** Sent in the request body; the handler looks the behaviour up by it. */
  id: string;
  /** For test titles. */
  title: string;
  before?(run: RunInfo): void;
  act(run: RunInfo): Promise<unknown>;
}

/**
 * The handler behaviours of the matrix. To add one, add an entry. A behaviour must not wait on
 * the client or on another request: the gate before it is the test's only handle on timing.
 */
export const HANDLER_BEHAVIOURS: readonly HandlerBehaviour[] = [
  {
    id: 'succeeds',
    title: 'succeeds (201, Location, JSON body)',
    before: (info) => info.setHeader('Location', `/things/${thingId(info)}`),
    act: async (info) => ({ id: thingId(info), tag: info.tag, run: info.run, note: 'é ✓' }),
  },
  {
    // Express refuses a header once the response has gone out: if an outer layer answered
    // first, this handler throws ERR_HTTP_HEADERS_SENT, and that error is its true outcome.
    id: 'late-header',
    title: 'sets Location after its work, then succeeds (throws on Express once a layer has answered)',
    act: async (info) => {
      info.setHeader('Location', `/things/${thingId(info)}`);
      return { id: thingId(info), tag: info.tag, run: info.run };
    },
  },
  {
    id: 'throws-402',
    title: 'throws 402 (HttpException)',
    act: async ({ tag, run }) => {
      throw new HttpException({ statusCode: 402, message: 'card declined', tag, run }, 402);
    },
  },
  {
    id: 'throws-503',
    title: 'throws 503 (ServiceUnavailableException)',
    act: async ({ tag, run }) => {
      throw new ServiceUnavailableException({ statusCode: 503, message: 'provider unavailable', tag, run });
    },
  },
  {
    id: 'throws-error',
    title: 'throws a plain Error (500)',
    act: async ({ run }) => {
      throw new Error(`provider exploded on run ${run}`);
    },
  },
  {
    id: 'slow',
    title: `is slow (${SLOW_MS} ms), then succeeds`,
    before: (info) => info.setHeader('Location', `/things/${thingId(info)}`),
    act: async (info) => {
      await sleep(SLOW_MS);
      return { id: thingId(info), tag: info.tag, run: info.run, slow: true };
    },
  },
];

export function handlerBehaviour(id: string): HandlerBehaviour {
  const behaviour = HANDLER_BEHAVIOURS.find((candidate) => candidate.id === id);
  if (!behaviour) throw new Error(`no handler behaviour "${id}"`);
  return behaviour;
}
