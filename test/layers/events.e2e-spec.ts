import { randomUUID } from 'node:crypto';
import type { IdempotencyStore } from 'nestjs-idempotency';
import { send, type HttpResult } from '../support/http/send.js';
import { sleep } from '../support/timing.js';
import { startEventsApp, OUTER_HEADER, type EventsApp, type EventsBody } from './support/events.app.js';
import { openLayerBackend, type LayerBackend, type LayerBackendName } from './support/layer-backends.js';
import type { Platform } from './support/layers.app.js';

/**
 * The record follows events, not timers (docs/contract.md B.7 rule 17a; issue 22). Each case was a
 * reproduction that failed before: a `@Res()` handler answering late from a client made at
 * startup, an outer layer answering while the claim was pending, an interceptor inside
 * `@Idempotent()` answering through the response, a completion or release that fails once, an
 * outer layer rendering long after the handler settled, and an outer RxJS `retry()`. On Express and
 * Fastify, memory, Redis and PostgreSQL with a transactional route. Pauses longer than 1 s stand
 * where a timer used to decide; nothing asserts a duration.
 */
const PLATFORMS: Platform[] = ['express', 'fastify'];
const BACKENDS: LayerBackendName[] = ['memory', 'redis', 'postgres-transactional'];
/** Longer than any grace a timer once gave an answer (1 s). */
const PAST_ANY_GRACE_MS = 1_300;

/** Store calls made to fail once, as one Redis timeout would (`failNext('complete')`). */
function injectFaults(store: IdempotencyStore): { failNext(call: 'complete' | 'release'): void } {
  const armed = new Set<string>();
  for (const call of ['complete', 'release'] as const) {
    const original = store[call].bind(store) as (...args: unknown[]) => Promise<boolean>;
    (store as unknown as Record<string, unknown>)[call] = async (...args: unknown[]) => {
      if (armed.delete(call)) throw new Error(`injected: the ${call} call timed out`);
      return original(...args);
    };
  }
  return { failNext: (call) => armed.add(call) };
}

function view(answer: HttpResult): string {
  const replayed = answer.headers.get('idempotent-replayed') === 'true' ? 'replay ' : '';
  let code: string;
  try {
    code = answer.json().code ?? '';
  } catch {
    code = '';
  }
  return `${replayed}${answer.status}${code ? ` ${code}` : ` ${answer.text}`}`;
}

describe.each(PLATFORMS)('the record follows events, not timers (%s)', (platform) => {
  describe.each(BACKENDS)('%s', (backendName) => {
    let backend: LayerBackend;
    let fixture: EventsApp;
    let faults: ReturnType<typeof injectFaults>;

    beforeAll(async () => {
      backend = await openLayerBackend(backendName, `events-${platform}`);
      faults = injectFaults(backend.moduleOptions.store as IdempotencyStore);
      fixture = await startEventsApp(platform, backend);
    });
    afterAll(async () => {
      fixture?.probe.openAll();
      await fixture?.app.close();
      await backend?.close();
    });

    const post = (path: string, key: string, body: EventsBody, outer?: string) =>
      send(fixture.url, path, { key, body, headers: outer ? { [OUTER_HEADER]: outer } : {} });
    /** A retry once the record is written (409 in progress until then). */
    const retryOnceSettled = async (path: string, key: string, body: EventsBody): Promise<HttpResult> => {
      for (let i = 0; i < 200; i++) {
        const answer = await post(path, key, body);
        if (!(answer.status === 409 && answer.json().code === 'idempotency_request_in_progress')) return answer;
        await sleep(25);
      }
      throw new Error('the record stayed in progress');
    };
    const started = (tag: string) => new Promise<void>((resolve) => fixture.probe.started.set(tag, resolve));

    it.each([402, 201, 502])(
      'a @Res() handler answering %i from a startup client, long after it returned: that answer is the record',
      async (status) => {
        const tag = randomUUID();
        const key = randomUUID();
        const body = { tag, status };
        const running = started(tag);
        const first = post('/bus-callback', key, body);
        await running;
        await sleep(PAST_ANY_GRACE_MS);
        const whileWaiting = view(await post('/bus-callback', key, body));
        fixture.bus.reply(tag, status);
        const answered = view(await first);
        let retry: HttpResult;
        if (status >= 500) {
          // Released: the retry runs the handler afresh, and the client made at startup answers it.
          const again = started(tag);
          const retried = retryOnceSettled('/bus-callback', key, body);
          await again;
          fixture.bus.reply(tag, 201);
          retry = await retried;
        } else retry = await retryOnceSettled('/bus-callback', key, body);
        const bodyOf = (run: number, answeredStatus: number) => JSON.stringify({ tag, run, status: answeredStatus });
        expect({ whileWaiting, answered, retry: view(retry), writes: await backend.writes(tag) }).toEqual({
          whileWaiting: '409 idempotency_request_in_progress',
          answered: `${status} ${bodyOf(1, status)}`,
          retry: status >= 500 ? `201 ${bodyOf(2, 201)}` : `replay ${status} ${bodyOf(1, status)}`,
          writes: status < 300 || status >= 500 ? 1 : 0,
        });
      },
    );

    it('an outer layer that answered while the claim was pending: the handler does not run for it (wait mode, no echo)', async () => {
      const tag = randomUUID();
      const key = randomUUID();
      const holder = { tag, status: 503 };
      const running = started(tag);
      const first = post('/waiting', key, holder);
      await running;
      const duplicate = view(await post('/waiting', key, holder, 'timeout'));
      fixture.probe.gate(`handler:${tag}`).open();
      const firstAnswer = view(await first);
      // The first run's 503 freed the key; the waiting duplicate won the claim after its client had
      // its 408, and gave it up without running. The client's retry runs it (and fails alike).
      const retry = view(await retryOnceSettled('/waiting', key, holder));
      expect({ duplicate, firstAnswer, retry, runs: fixture.probe.runs.get(tag) }).toEqual({
        duplicate: expect.stringMatching(/^408/),
        firstAnswer: expect.stringMatching(/^503/),
        retry: expect.stringMatching(/^503/),
        runs: 2,
      });
    });

    it('an interceptor inside @Idempotent() that declines through getResponse(): the decline is the record', async () => {
      const tag = randomUUID();
      const key = randomUUID();
      const body = { tag, status: 402 };
      const first = view(await post('/inner-answers', key, body));
      const retry = view(await retryOnceSettled('/inner-answers', key, body));
      expect({ first, retry }).toEqual({ first: expect.stringMatching(/^402 /), retry: `replay ${first}` });
    });

    it.each([
      ['complete', 201],
      ['release', 503],
    ] as const)('a %s call that fails once is retried: the retry gets the true outcome', async (call, status) => {
      const tag = randomUUID();
      const key = randomUUID();
      fixture.probe.gate(`handler:${tag}`).open();
      faults.failNext(call);
      const first = view(await post('/plain', key, { tag, status }));
      const retry = await retryOnceSettled('/plain', key, { tag, status });
      expect({ first, retry: view(retry), runs: fixture.probe.runs.get(tag) }).toEqual({
        first: expect.stringMatching(new RegExp(`^${status}`)),
        retry: status < 300 ? `replay ${first}` : expect.stringMatching(/^503/),
        runs: status < 300 ? 1 : 2,
      });
    });

    it('an outer layer that renders long after the handler settled: its rendering is the record', async () => {
      const tag = randomUUID();
      const key = randomUUID();
      const body = { tag, status: 201 };
      fixture.probe.gate(`handler:${tag}`).open();
      const first = post('/plain', key, body, 'slow-envelope');
      await sleep(PAST_ANY_GRACE_MS);
      fixture.probe.gate(`envelope:${tag}`).open();
      const answered = view(await first);
      const retry = view(await retryOnceSettled('/plain', key, body));
      expect({ answered, retry }).toEqual({
        answered: `201 ${JSON.stringify({ data: { tag, run: 1 } })}`,
        retry: `replay ${answered}`,
      });
    });

    it.each([402, 503])('an outer RxJS retry() around a handler that fails with %i', async (status) => {
      const tag = randomUUID();
      const key = randomUUID();
      const body = { tag, status };
      fixture.probe.gate(`handler:${tag}`).open();
      const first = view(await post('/plain', key, body, 'retry'));
      const retry = view(await retryOnceSettled('/plain', key, body));
      expect({ first, retry, runs: fixture.probe.runs.get(tag) }).toEqual({
        first: expect.stringMatching(new RegExp(`^${status} `)),
        // A stored decline is answered to every attempt; a released 503 lets each attempt run afresh.
        retry: status < 500 ? `replay ${first}` : expect.stringMatching(/^503 /),
        runs: status < 500 ? 1 : 4,
      });
    });
  });
});
