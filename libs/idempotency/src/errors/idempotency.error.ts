/**
 * The base of the library's plain (non-HTTP) errors, so an application can tell them apart
 * with one `instanceof IdempotencyError` check. Its `name` is the subclass's name.
 *
 * The HTTP exceptions (`IdempotencyProblemException`, `IdempotencyFinalException`,
 * `IdempotencyTransientException`) extend Nest's `HttpException` instead, as Nest's exception
 * layer requires; a class cannot extend both.
 *
 * @publicApi
 */
export abstract class IdempotencyError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = this.constructor.name;
  }
}
