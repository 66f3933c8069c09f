import { format } from 'node:util';

type Body = () => void | Promise<void>;

/**
 * The four functions of a test runner the store contract suites need. Jest, Vitest (with
 * `globals`, or imported), Mocha and `node:test` all provide them with these signatures.
 *
 * @example
 * import { afterEach, beforeEach, describe, it } from 'node:test';
 * describeStoreContract('my store', makeStore, { describe, it, beforeEach, afterEach });
 * @publicApi
 */
export interface ContractTestRunner {
  describe(name: string, body: () => void): unknown;
  it(name: string, body: Body): unknown;
  beforeEach(hook: Body): unknown;
  afterEach(hook: Body): unknown;
}

/** The runner passed in, or the one whose globals are installed (Jest, Vitest with globals, Mocha). @internal */
export function resolveRunner(runner: ContractTestRunner | undefined): ContractTestRunner {
  if (runner) return runner;
  const globals = globalThis as Partial<ContractTestRunner>;
  const { describe, it, beforeEach, afterEach } = globals;
  if (!describe || !it || !beforeEach || !afterEach) {
    throw new TypeError(
      'No test runner globals (describe, it, beforeEach, afterEach): pass your runner as the last argument, e.g. ' +
        "{ describe, it, beforeEach, afterEach } from 'node:test' or 'vitest'.",
    );
  }
  return { describe, it, beforeEach, afterEach };
}

/** `it.each(table)(name, body)` on any runner: one test per row, `%s`/`%p` in `name` filled from the row. @internal */
export function itEach(it: ContractTestRunner['it']) {
  return <const Row extends readonly unknown[]>(table: readonly Row[]) =>
    (name: string, body: (...row: [...Row]) => void | Promise<void>): void => {
      const placeholders = name.match(/%[sdifjoOp]/g)?.length ?? 0;
      for (const row of table)
        it(format(name.replaceAll('%p', '%O'), ...row.slice(0, placeholders)), () => body(...(row as [...Row])));
    };
}
