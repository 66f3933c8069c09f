import { buildScopedKey } from '../../engine/scoped-key.js';
import { computeFingerprint, type FingerprintInput } from './fingerprint.js';

/**
 * The values a deployed version stores: a record's fingerprint and id are compared with those a
 * retry computes after an upgrade, so a change to how they are computed (a faster hash call, a
 * shortcut for an empty part) must leave every one of them as it was. Computed by the code as it
 * stood before issue 31 changed how the digests are taken.
 */
describe('fingerprint and scoped id: known answers', () => {
  const base: FingerprintInput = {
    method: 'POST',
    routeTemplate: '/orders/:id',
    pathParams: { id: '42' },
    query: '',
    contentType: 'application/json',
  };

  it.each<[string, Partial<FingerprintInput>, string]>([
    [
      'a JSON body with escapes, numbers and unsorted members',
      { body: Buffer.from('{ "b": 1.0, "a": [true, "é\\u0000"] }') },
      '1bbFfihlkEcxN_f2AsfSF4Zaw6WhtRsAgLYt5k6-RU0',
    ],
    [
      'a query string',
      { query: 'b=2&a=1&a=0', body: Buffer.from('{}') },
      'A7YVyBZx7JfSrdSQn-R-lAASzPnbKF7n5jIqoVxJmnU',
    ],
    [
      'a form body',
      { contentType: 'application/x-www-form-urlencoded', body: Buffer.from('x=1&y=%C3%A9') },
      'HDMFwstmd2UcIiSqPSUe99KQKOG6x1_9zIuakpEKdFk',
    ],
    [
      'no body and no media type',
      { contentType: undefined, body: Buffer.alloc(0) },
      '5vP9drQVHEqgjRNRcb2Q-Q2tmaehjhwLcSeGMr5EpiA',
    ],
    [
      'configured headers and scope extras',
      { body: Buffer.from('[]'), headers: [['X-Api-Version', '2']], extra: { principal: 'u1', tenant: 't1' } },
      'nlxBByozLsJavWrCLRzSLmtg-INe5laRUCARG2cxA7g',
    ],
  ])('%s', async (_name, overrides, expected) => {
    await expect(computeFingerprint({ ...base, ...overrides })).resolves.toBe(expected);
  });

  it('the scoped id of a key in tenant, principal and operation', () => {
    const scoped = buildScopedKey({ operation: 'POST /orders', tenant: 't1', principal: 'u1', key: 'k-1' }, [
      'tenant',
      'principal',
      'operation',
    ]);
    expect(scoped).toEqual({
      id: '5d86b2744be0a96d92a71ed0cba123b6',
      scopeKey: '["v1",["tenant","t1"],["principal","u1"],["operation","POST /orders"],["key","k-1"]]',
    });
  });
});
