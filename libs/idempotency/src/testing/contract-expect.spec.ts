import { AssertionError } from 'node:assert';
import { expect as contractExpect } from './contract-expect.js';
import { itEach, resolveRunner } from './contract-runner.js';

/** The contract suites are only as strict as their `expect`: each matcher must fail when it should. */
describe('the contract suites’ expect', () => {
  const fails = (assertion: () => void) => expect(assertion).toThrow(AssertionError);
  const rejects = (assertion: Promise<void>) => expect(assertion).rejects.toThrow(AssertionError);

  it('toBe compares with Object.is, and .not negates it', () => {
    contractExpect(NaN).toBe(NaN);
    fails(() => contractExpect(1).toBe('1'));
    fails(() => contractExpect({}).toBe({}));
    contractExpect('a').not.toBe('b');
    fails(() => contractExpect('a').not.toBe('a'));
  });

  it('toEqual compares deeply: undefined properties count as absent, buffers by bytes, expect.any by type', () => {
    contractExpect({ a: 1, b: undefined, c: [Buffer.from('x')] }).toEqual({ a: 1, c: [Buffer.from('x')] });
    contractExpect({ kind: 'existing', nowMs: 5 }).toEqual({ kind: 'existing', nowMs: contractExpect.any(Number) });
    fails(() => contractExpect({ a: 1 }).toEqual({ a: 1, b: 2 }));
    fails(() => contractExpect({ a: 1, b: 2 }).toEqual({ a: 1 }));
    fails(() => contractExpect([1, 2]).toEqual([1, 2, 3]));
    fails(() => contractExpect(Buffer.from('x')).toEqual(Buffer.from('y')));
    fails(() => contractExpect({ nowMs: '5' }).toEqual({ nowMs: contractExpect.any(Number) }));
    fails(() => contractExpect(new Date(1)).toEqual(new Date(2)));
  });

  it('toMatchObject compares only the expected properties', () => {
    contractExpect({ state: 'completed', fencingToken: 1, extra: true }).toMatchObject({
      state: 'completed',
      fencingToken: 1,
    });
    fails(() => contractExpect({ state: 'in_progress' }).toMatchObject({ state: 'completed' }));
  });

  it('checks definedness, order, length, patterns and classes', () => {
    contractExpect(0).toBeDefined();
    fails(() => contractExpect(undefined).toBeDefined());
    contractExpect(undefined).toBeUndefined();
    fails(() => contractExpect(null).toBeUndefined());
    contractExpect(2).toBeGreaterThan(1);
    fails(() => contractExpect(1).toBeGreaterThan(1));
    contractExpect(1).toBeGreaterThanOrEqual(1);
    fails(() => contractExpect(0).toBeGreaterThanOrEqual(1));
    contractExpect(1).toBeLessThan(2);
    fails(() => contractExpect(2).toBeLessThan(2));
    contractExpect(2).toBeLessThanOrEqual(2);
    fails(() => contractExpect(3).toBeLessThanOrEqual(2));
    contractExpect([1, 2]).toHaveLength(2);
    fails(() => contractExpect([1]).toHaveLength(2));
    contractExpect('idem:abc').toMatch(/^idem:/);
    fails(() => contractExpect('abc').toMatch('x'));
    contractExpect(new RangeError('x')).toBeInstanceOf(RangeError);
    fails(() => contractExpect(new Error('x')).toBeInstanceOf(RangeError));
  });

  it('rejects.toThrow matches the class or the message, and fails on a fulfilment', async () => {
    await contractExpect(Promise.reject(new RangeError('lease too short'))).rejects.toThrow(RangeError);
    await contractExpect(Promise.reject(new Error('roll back'))).rejects.toThrow('roll back');
    await contractExpect(Promise.reject(new Error('x'))).rejects.toThrow();
    await rejects(contractExpect(Promise.reject(new TypeError('x'))).rejects.toThrow(RangeError));
    await rejects(contractExpect(Promise.resolve('fine')).rejects.toThrow());
    const failure = new Error('the work failed');
    await contractExpect(Promise.reject(failure)).rejects.toBe(failure);
    await rejects(contractExpect(Promise.reject(new Error('other'))).rejects.toBe(failure));
    await contractExpect(Promise.reject(new RangeError('x'))).rejects.toBeInstanceOf(RangeError);
  });

  it('resolves.toBeUndefined fails on a rejection or a value', async () => {
    await contractExpect(Promise.resolve(undefined)).resolves.toBeUndefined();
    await rejects(contractExpect(Promise.resolve(1)).resolves.toBeUndefined());
    await rejects(contractExpect(Promise.reject(new Error('down'))).resolves.toBeUndefined());
  });
});

describe('the contract suites’ runner', () => {
  it('uses the globals of the runner when none is passed', () => {
    expect(resolveRunner(undefined).describe).toBe(describe);
  });

  it('runs one test per row, with the row in the title', () => {
    const registered: string[] = [];
    const fakeIt = (name: string) => void registered.push(name);
    itEach(fakeIt)([
      ['leaseMs', 0],
      ['ttlMs', Number.NaN],
    ])('rejects %s = %p', () => undefined);
    expect(registered).toEqual(['rejects leaseMs = 0', 'rejects ttlMs = NaN']);
  });
});
