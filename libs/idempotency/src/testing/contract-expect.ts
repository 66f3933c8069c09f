import { AssertionError } from 'node:assert';
import { inspect, isDeepStrictEqual } from 'node:util';

/**
 * The small `expect` the store contract suites assert with: the Jest/Vitest matchers they use,
 * built on `node:assert`'s `AssertionError`, so the suites run under any test runner (Jest,
 * Vitest, Mocha, `node:test`) without depending on one. Equality follows `toEqual`: properties
 * whose value is `undefined` count as absent, buffers compare by bytes, and `expect.any(Type)`
 * matches any value of that type.
 *
 * @internal
 */

/** `expect.any(Number)`: matches any value of the type (a primitive of it, or an instance). */
class AnyOf {
  constructor(readonly type: abstract new (...args: never[]) => unknown) {}

  matches(value: unknown): boolean {
    const primitives = new Map<unknown, string>([
      [Number, 'number'],
      [String, 'string'],
      [Boolean, 'boolean'],
      [BigInt, 'bigint'],
      [Symbol, 'symbol'],
    ]);
    const primitive = primitives.get(this.type);
    if (primitive && typeof value === primitive) return true;
    return value instanceof this.type;
  }

  [inspect.custom](): string {
    return `Any<${this.type.name}>`;
  }
}

type Constructor = abstract new (...args: never[]) => unknown;

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;

/** `toEqual` equality; with `partial`, `expected` only names the properties to compare (`toMatchObject`). */
function equals(actual: unknown, expected: unknown, partial = false): boolean {
  if (expected instanceof AnyOf) return expected.matches(actual);
  if (Object.is(actual, expected)) return true;
  if (!isObject(actual) || !isObject(expected)) return false;
  if (ArrayBuffer.isView(actual) || ArrayBuffer.isView(expected)) {
    return (
      ArrayBuffer.isView(actual) &&
      ArrayBuffer.isView(expected) &&
      isDeepStrictEqual(
        Buffer.from(actual.buffer, actual.byteOffset, actual.byteLength),
        Buffer.from(expected.buffer, expected.byteOffset, expected.byteLength),
      )
    );
  }
  if (actual instanceof Date || expected instanceof Date) {
    return actual instanceof Date && expected instanceof Date && actual.getTime() === expected.getTime();
  }
  if (Array.isArray(actual) || Array.isArray(expected)) {
    if (!Array.isArray(actual) || !Array.isArray(expected) || actual.length !== expected.length) return false;
    return expected.every((item, index) => equals(actual[index], item, partial));
  }
  if (actual instanceof Map || actual instanceof Set || expected instanceof Map || expected instanceof Set) {
    return isDeepStrictEqual(actual, expected);
  }
  const defined = (object: Record<string, unknown>) => Object.keys(object).filter((key) => object[key] !== undefined);
  const expectedKeys = defined(expected);
  if (!partial) {
    const actualKeys = defined(actual);
    if (actualKeys.length !== expectedKeys.length || actualKeys.some((key) => !expectedKeys.includes(key)))
      return false;
  }
  return expectedKeys.every((key) => key in actual && equals(actual[key], expected[key], partial));
}

const show = (value: unknown): string => inspect(value, { depth: 6, breakLength: 120 });

function fail(message: string, actual: unknown, expected: unknown, operator: string): never {
  throw new AssertionError({ message, actual, expected, operator });
}

/** The matchers of one value, negated by `.not`. */
export interface Matchers {
  toBe(expected: unknown): void;
  toEqual(expected: unknown): void;
  toMatchObject(expected: object): void;
  toBeDefined(): void;
  toBeUndefined(): void;
  toBeGreaterThan(bound: number): void;
  toBeGreaterThanOrEqual(bound: number): void;
  toBeLessThan(bound: number): void;
  toBeLessThanOrEqual(bound: number): void;
  toHaveLength(length: number): void;
  toMatch(pattern: RegExp | string): void;
  toBeInstanceOf(type: Constructor): void;
}

/** The matchers of a promise's outcome. */
export interface AsyncMatchers {
  toBe(expected: unknown): Promise<void>;
  toBeUndefined(): Promise<void>;
  toBeInstanceOf(type: Constructor): Promise<void>;
  /** The rejection is an instance of `type`, or an Error whose message contains or matches `message`. */
  toThrow(expected?: Constructor | string | RegExp): Promise<void>;
}

function matchers(actual: unknown, negated: boolean): Matchers {
  const check = (pass: boolean, what: string, expected: unknown, operator: string) => {
    if (pass === negated) fail(`expected ${show(actual)} ${negated ? 'not ' : ''}${what}`, actual, expected, operator);
  };
  return {
    toBe: (expected) => check(Object.is(actual, expected), `to be ${show(expected)}`, expected, 'toBe'),
    toEqual: (expected) => check(equals(actual, expected), `to equal ${show(expected)}`, expected, 'toEqual'),
    toMatchObject: (expected) =>
      check(equals(actual, expected, true), `to match ${show(expected)}`, expected, 'toMatchObject'),
    toBeDefined: () => check(actual !== undefined, 'to be defined', undefined, 'toBeDefined'),
    toBeUndefined: () => check(actual === undefined, 'to be undefined', undefined, 'toBeUndefined'),
    toBeGreaterThan: (bound) => check((actual as number) > bound, `to be > ${bound}`, bound, '>'),
    toBeGreaterThanOrEqual: (bound) => check((actual as number) >= bound, `to be >= ${bound}`, bound, '>='),
    toBeLessThan: (bound) => check((actual as number) < bound, `to be < ${bound}`, bound, '<'),
    toBeLessThanOrEqual: (bound) => check((actual as number) <= bound, `to be <= ${bound}`, bound, '<='),
    toHaveLength: (length) =>
      check((actual as { length?: unknown })?.length === length, `to have length ${length}`, length, 'toHaveLength'),
    toMatch: (pattern) =>
      check(
        typeof actual === 'string' && (typeof pattern === 'string' ? actual.includes(pattern) : pattern.test(actual)),
        `to match ${String(pattern)}`,
        pattern,
        'toMatch',
      ),
    toBeInstanceOf: (type) => check(actual instanceof type, `to be an instance of ${type.name}`, type, 'instanceof'),
  };
}

function thrownMatches(error: unknown, expected: Constructor | string | RegExp | undefined): boolean {
  if (expected === undefined) return true;
  if (typeof expected === 'function') return error instanceof expected;
  const message = error instanceof Error ? error.message : undefined;
  if (message === undefined) return false;
  return typeof expected === 'string' ? message.includes(expected) : expected.test(message);
}

/** `expect(value)`, with `.not`, `.resolves` and `.rejects`. @internal */
export function expect(actual: unknown): Matchers & { not: Matchers; resolves: AsyncMatchers; rejects: AsyncMatchers } {
  const settled = async (wanted: 'fulfilled' | 'rejected'): Promise<unknown> => {
    try {
      const value = await actual;
      if (wanted === 'rejected') fail(`expected a rejection, got ${show(value)}`, value, 'a rejection', 'rejects');
      return value;
    } catch (error) {
      if (error instanceof AssertionError && wanted === 'rejected') throw error;
      if (wanted === 'fulfilled')
        fail(`expected a fulfilment, got the rejection ${show(error)}`, error, 'a fulfilment', 'resolves');
      return error;
    }
  };
  const async = (wanted: 'fulfilled' | 'rejected'): AsyncMatchers => ({
    toBe: async (expected) => matchers(await settled(wanted), false).toBe(expected),
    toBeUndefined: async () => matchers(await settled(wanted), false).toBeUndefined(),
    toBeInstanceOf: async (type) => matchers(await settled(wanted), false).toBeInstanceOf(type),
    toThrow: async (expected) => {
      const error = await settled(wanted);
      if (!thrownMatches(error, expected))
        fail(`expected a rejection matching ${show(expected)}, got ${show(error)}`, error, expected, 'toThrow');
    },
  });
  return {
    ...matchers(actual, false),
    not: matchers(actual, true),
    resolves: async('fulfilled'),
    rejects: async('rejected'),
  };
}

expect.any = (type: Constructor): unknown => new AnyOf(type);
