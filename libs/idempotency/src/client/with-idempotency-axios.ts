import { trackContexts } from '../context/idempotency-request-context.js';
import { chooseIdempotencyKey, defaultCallName } from './idempotency-key-source.js';
import {
  resolveClientOptions,
  type IdempotentClientOptions,
  type ResolvedClientOptions,
  type RetryableAnswer,
} from './idempotent-client.options.js';
import { IdempotentRequestError, type IdempotentRequestFailure } from './idempotent-request.error.js';
import { isRetryableMethod, RetryOperation, type StopReason } from './retry-policy.js';
import { isReplayMarker, type IdempotentCallOutcome } from './with-idempotency.js';

/**
 * The part of an axios instance (axios 1.x, Nest's `HttpService.axiosRef`) the client uses:
 * described here so that neither axios nor its types are needed to load this entry point.
 */
export interface AxiosLikeInstance {
  interceptors: {
    request: { use(onFulfilled: AnyCallback, onRejected?: AnyCallback): number };
    response: { use(onFulfilled: AnyCallback, onRejected?: AnyCallback): number };
  };
  request(config: never): Promise<unknown>;
}

// axios types its interceptors with its own config types, which this entry point does not import.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyCallback = (value: any) => any;

/** What a call may add to its axios config (cast or intersect with `AxiosRequestConfig`). */
export interface IdempotentAxiosConfig {
  /** The key of this operation. @default the request's derived key inside a claimed handler, else a random UUID */
  idempotencyKey?: string;
  /** Inside a claimed handler: the name the key is derived under. @default `${method} ${origin}${path}` */
  idempotencyKeyName?: string;
}

/** Headers as axios hands them to interceptors (`AxiosHeaders`), or a plain object. */
type HeaderBag = { get?(name: string): unknown; set?(name: string, value: string): unknown } & Record<string, unknown>;

interface CallConfig extends IdempotentAxiosConfig {
  method?: string;
  url?: string;
  baseURL?: string;
  headers?: HeaderBag;
  timeout?: number;
  signal?: AbortSignal;
  /** This call's state, carried across its retries (axios keeps class instances as they are). */
  idempotencyCall?: IdempotentCall;
}

interface CallResponse {
  status: number;
  headers?: HeaderBag;
  data?: unknown;
  config?: CallConfig;
  idempotency?: IdempotentCallOutcome;
}

interface CallError {
  config?: CallConfig;
  response?: CallResponse;
  code?: string;
  idempotency?: IdempotentCallOutcome;
}

/** One logical call through axios: its key and its attempts. */
class IdempotentCall {
  constructor(
    readonly operation: RetryOperation,
    readonly key: string | undefined,
    readonly keySource: IdempotentCallOutcome['keySource'],
  ) {}

  outcome(response: CallResponse, stoppedBy: StopReason, replayHeader: string): IdempotentCallOutcome {
    return {
      key: this.key,
      keySource: this.keySource,
      attempts: this.operation.attempts,
      replayed: isReplayMarker(headerOf(response.headers, replayHeader)),
      stoppedBy,
    };
  }
}

/** The instances that have the interceptors already. */
const applied = new WeakSet<AxiosLikeInstance>();

/**
 * Makes an axios instance send keyed, safely retried requests, with the rules and options of
 * {@link withIdempotency} (docs/client.md). In Nest, apply it to `HttpService.axiosRef` once:
 * every `HttpService` call then carries a key (POST, PATCH) and retries when that is safe. The
 * response (or the error's response) gets `idempotency`: attempts made and `replayed`; a call
 * that gets no answer rejects with {@link IdempotentRequestError}.
 *
 * @example
 * \@Module({ imports: [HttpModule] })
 * export class PaymentsClientModule implements OnModuleInit {
 *   constructor(private readonly http: HttpService) {}
 *   onModuleInit() {
 *     withIdempotencyAxios(this.http.axiosRef, { maxAttempts: 5 });
 *   }
 * }
 * @publicApi
 */
export function withIdempotencyAxios<T extends AxiosLikeInstance>(
  instance: T,
  options: IdempotentClientOptions = {},
): T {
  // Two sets of these interceptors would retry each other's retries.
  if (applied.has(instance)) throw new Error('withIdempotencyAxios() was already applied to this axios instance.');
  const resolved = resolveClientOptions(options);
  applied.add(instance);
  trackContexts();
  const retryOrSettle = async (response: CallResponse, config: CallConfig, call: IdempotentCall, error?: CallError) => {
    const decision = call.operation.next({ kind: 'answer', answer: answerOf(response) });
    if (decision.retry) return retry(instance, config, decision.delayMs, resolved);
    response.idempotency = call.outcome(response, decision.reason, resolved.replayHeader);
    if (!error) return response;
    error.idempotency = response.idempotency;
    throw error;
  };

  instance.interceptors.request.use((config: CallConfig) => {
    config.idempotencyCall ??= startCall(config, resolved);
    config.idempotencyCall.operation.attempts += 1;
    // The deadline bounds the attempt too (at least 1 ms: 0 would mean no timeout to axios).
    const remaining = Math.max(1, config.idempotencyCall.operation.remainingMs());
    config.timeout = config.timeout ? Math.min(config.timeout, remaining) : remaining;
    return config;
  });

  instance.interceptors.response.use(
    (response: CallResponse) => {
      const call = response.config?.idempotencyCall;
      return call ? retryOrSettle(response, response.config!, call) : response;
    },
    async (error: CallError) => {
      const config = error.config;
      const call = config?.idempotencyCall;
      if (!config || !call) throw error;
      if (error.response) return retryOrSettle(error.response, config, call, error);
      if (error.code === 'ERR_CANCELED' || config.signal?.aborted) throw error;
      const fail = (reason: StopReason) =>
        new IdempotentRequestError(
          reason as IdempotentRequestFailure,
          call.operation.attempts,
          call.key,
          call.keySource,
          {
            cause: error,
          },
        );
      if (call.operation.remainingMs() === 0) throw fail('deadline');
      const decision = call.operation.next({ kind: 'network-error' });
      // A call that could never be retried fails as axios failed it.
      if (!decision.retry && decision.reason === 'unsafe-method') throw error;
      if (!decision.retry) throw fail(decision.reason);
      return retry(instance, config, decision.delayMs, resolved);
    },
  );
  return instance;
}

function startCall(config: CallConfig, options: ResolvedClientOptions): IdempotentCall {
  const method = (config.method ?? 'get').toUpperCase();
  const keyed = options.keyedMethods.includes(method);
  const operation = new RetryOperation(options, isRetryableMethod(method, keyed));
  if (!keyed) return new IdempotentCall(operation, undefined, undefined);
  const url =
    config.baseURL && !/^[a-z][a-z\d+.-]*:/i.test(config.url ?? '')
      ? `${config.baseURL}${config.url ?? ''}`
      : (config.url ?? '');
  const preset = headerOf(config.headers, options.keyHeader) ?? undefined;
  const { key, source } = chooseIdempotencyKey(
    config.idempotencyKey ?? preset,
    config.idempotencyKeyName ?? defaultCallName(method, url),
  );
  if (typeof config.headers?.set === 'function') config.headers.set(options.keyHeader, key);
  else config.headers = { ...config.headers, [options.keyHeader]: key };
  return new IdempotentCall(operation, key, source);
}

async function retry(
  instance: AxiosLikeInstance,
  config: CallConfig,
  delayMs: number,
  options: ResolvedClientOptions,
): Promise<unknown> {
  await options.sleep(delayMs, config.signal);
  return instance.request(config as never);
}

function answerOf(response: CallResponse): RetryableAnswer {
  let problem = response.data;
  if (typeof problem === 'string') {
    try {
      problem = JSON.parse(problem);
    } catch {
      problem = undefined;
    }
  }
  return { status: response.status, header: (name) => headerOf(response.headers, name), problem };
}

/** A header of axios' `AxiosHeaders` (case-insensitive `get`) or of a plain object. */
function headerOf(headers: HeaderBag | undefined, name: string): string | null {
  if (!headers) return null;
  const value =
    typeof headers.get === 'function'
      ? headers.get(name)
      : Object.entries(headers).find(([header]) => header.toLowerCase() === name.toLowerCase())?.[1];
  return value === undefined || value === null || value === false ? null : String(value);
}
