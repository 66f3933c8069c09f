import { canonicalizeJson, computeFingerprint, type FingerprintInput, type UploadedFileDigest } from './fingerprint.js';

const base: FingerprintInput = {
  method: 'POST',
  routeTemplate: '/v1/accounts/:accountId/transfers',
  pathParams: { accountId: 'acc_1' },
  query: '',
  contentType: 'application/json',
  body: Buffer.from('{"amount":100,"currency":"eur"}'),
};

const fp = (overrides: Partial<FingerprintInput> = {}): Promise<string> =>
  computeFingerprint({ ...base, ...overrides });
const json = (text: string, overrides: Partial<FingerprintInput> = {}): Promise<string> =>
  fp({ body: Buffer.from(text), ...overrides });

/** Builds a multipart/form-data body; each part is [headers, content]. */
const multipart = (boundary: string, parts: Array<[string[], string | Buffer]>): Partial<FingerprintInput> => {
  const chunks: Buffer[] = [];
  for (const [headers, content] of parts) {
    chunks.push(
      Buffer.from(`--${boundary}\r\n${headers.join('\r\n')}\r\n\r\n`),
      Buffer.from(content),
      Buffer.from('\r\n'),
    );
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { contentType: `multipart/form-data; boundary=${boundary}`, body: Buffer.concat(chunks) };
};

const formParts: Array<[string[], string | Buffer]> = [
  [['Content-Disposition: form-data; name="amount"'], '100'],
  [
    ['Content-Disposition: form-data; name="receipt"; filename="scans/receipt.pdf"', 'Content-Type: application/pdf'],
    Buffer.from([0x25, 0x50, 0x44, 0x46, 0x00, 0xff]),
  ],
];

describe('computeFingerprint', () => {
  it('B.4 rule 14: is a base64url SHA-256 (43 characters) and deterministic', async () => {
    const first = await fp();
    expect(first).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(await fp()).toBe(first);
  });

  describe('B.4 rule 14: every part of the request is in the fingerprint', () => {
    it.each<[string, Partial<FingerprintInput>]>([
      ['the method', { method: 'PATCH' }],
      ['the route template', { routeTemplate: '/v1/accounts/:accountId/payouts' }],
      ['a path parameter value', { pathParams: { accountId: 'acc_2' } }],
      ['a path parameter name', { pathParams: { account: 'acc_1' } }],
      ['an added path parameter', { pathParams: { accountId: 'acc_1', extra: '' } }],
      ['the query', { query: 'dryRun=true' }],
      ['the media type essence', { contentType: 'application/merge-patch+json' }],
      ['a fingerprinted header value', { headers: [['stripe-version', '2024-07-01']] }],
      ['extra (principal / operation)', { extra: { principal: 'user_1' } }],
      ['the body', { body: Buffer.from('{"amount":101,"currency":"eur"}') }],
    ])('B.4 rule 14: changing %s changes it', async (_part, change) => {
      const changed = await fp(change);
      expect(changed).not.toBe(await fp());
    });

    it('B.4 rule 14: a fingerprinted header value change, and absent vs empty, change it', async () => {
      const v1 = await fp({ headers: [['Stripe-Version', '2024-06-20']] });
      expect(await fp({ headers: [['Stripe-Version', '2024-07-01']] })).not.toBe(v1);
      expect(await fp({ headers: [['Stripe-Version', '']] })).not.toBe(await fp({ headers: [] }));
    });

    it('B.4 rule 14: header names are case-insensitive and the configured order does not matter', async () => {
      const a = await fp({
        headers: [
          ['Stripe-Version', '1'],
          ['Accept', 'application/json'],
        ],
      });
      expect(
        await fp({
          headers: [
            ['accept', 'application/json'],
            ['stripe-version', '1'],
          ],
        }),
      ).toBe(a);
    });

    it('B.4 rule 14: each extra entry counts, by name and value', async () => {
      const a = await fp({ extra: { principal: 'u1', operation: 'POST /transfers' } });
      expect(await fp({ extra: { operation: 'POST /transfers', principal: 'u1' } })).toBe(a);
      expect(await fp({ extra: { principal: 'u2', operation: 'POST /transfers' } })).not.toBe(a);
      expect(await fp({ extra: { principal: 'u1', operation: 'POST /payouts' } })).not.toBe(a);
      expect(await fp({ extra: { tenant: 'u1', operation: 'POST /transfers' } })).not.toBe(a);
    });

    it('B.4 rule 14: path parameter order does not matter', async () => {
      const a = await fp({ pathParams: { accountId: 'a', transferId: 't' } });
      expect(await fp({ pathParams: { transferId: 't', accountId: 'a' } })).toBe(a);
    });

    it('B.4 rule 14: the encoding is injective: content cannot shift between parts', async () => {
      const shifted = await fp({ method: 'POST/', routeTemplate: 'ab' });
      expect(await fp({ method: 'POST', routeTemplate: '/ab' })).not.toBe(shifted);
      expect(await fp({ pathParams: { a: 'b', c: 'd' } })).not.toBe(await fp({ pathParams: { a: 'bc', '': 'd' } }));
      expect(await fp({ extra: { x: '1' } })).not.toBe(await fp({ headers: [['x', '1']] }));
      expect(await fp({ extra: { a: 'b' } })).not.toBe(await fp({ pathParams: { ...base.pathParams, a: 'b' } }));
      expect(await fp({ query: 'a%3Db=c' })).not.toBe(await fp({ query: 'a=b%3Dc' }));
      expect(await fp({ query: 'a=b%26c' })).not.toBe(await fp({ query: 'a=b&c' }));
    });

    it('B.4 rule 14: a path parameter that is absent at runtime differs from an empty one', async () => {
      const absent = { id: undefined } as unknown as Record<string, string>;
      expect(await fp({ pathParams: absent })).not.toBe(await fp({ pathParams: { id: '' } }));
    });
  });

  describe('B.4 rule 14: query', () => {
    it('B.4 rule 14: the order of different names is irrelevant', async () => {
      expect(await fp({ query: 'a=1&b=2&c=3' })).toBe(await fp({ query: 'c=3&a=1&b=2' }));
    });

    it('B.4 rule 14: the order of repeated values is relevant (stable sort)', async () => {
      expect(await fp({ query: 'a=1&b=x&a=2' })).toBe(await fp({ query: 'b=x&a=1&a=2' }));
      expect(await fp({ query: 'a=1&a=2' })).not.toBe(await fp({ query: 'a=2&a=1' }));
    });

    it('B.4 rule 14: names and values are percent-decoded, "+" being a space', async () => {
      expect(await fp({ query: 'q=a+b' })).toBe(await fp({ query: 'q=a%20b' }));
      expect(await fp({ query: '%71=%41' })).toBe(await fp({ query: 'q=A' }));
      expect(await fp({ query: 'q=%C3%A9' })).toBe(await fp({ query: 'q=\u00e9' }));
      expect(await fp({ query: 'q=%2B' })).not.toBe(await fp({ query: 'q=+' }));
      expect(await fp({ query: 'q=%zz' })).not.toBe(await fp({ query: 'q=' }));
    });

    it('B.4 rule 14: invalid UTF-8 after decoding is compared byte for byte', async () => {
      expect(await fp({ query: 'q=%FF' })).not.toBe(await fp({ query: 'q=%FE' }));
    });

    it('B.4 rule 14: a value with an invalid escape is kept whole, as qs and Fastify keep it: to=%zz%41 differs from to=%zzA', async () => {
      expect(await fp({ query: 'to=%zz%41' })).not.toBe(await fp({ query: 'to=%zzA' }));
      expect(await fp({ query: 'to=%zz%41' })).toBe(await fp({ query: 'to=%zz%41' }));
      expect(await fp({ query: 'to=%C3' })).not.toBe(await fp({ query: 'to=%c3' }));
    });

    it('B.4 rule 14: names of one root keep their order (qs nests a[b] under a); other names may move', async () => {
      expect(await fp({ query: 'a=x&a[b]=y' })).not.toBe(await fp({ query: 'a[b]=y&a=x' }));
      expect(await fp({ query: 'a[b]=y&z=1&a[c]=x' })).toBe(await fp({ query: 'z=1&a[b]=y&a[c]=x' }));
    });

    it('B.4 rule 14: above 1000 sequences, where parsers drop pairs by position, the raw query counts', async () => {
      const many = Array.from({ length: 1001 }, (_, i) => `p${i}=1`);
      expect(await fp({ query: many.join('&') })).not.toBe(await fp({ query: [...many].reverse().join('&') }));
      expect(await fp({ query: many.join('&') })).toBe(await fp({ query: many.join('&') }));
    });

    it('B.4 rule 14: empty sequences are skipped and "a" equals "a=" (WHATWG form parsing)', async () => {
      expect(await fp({ query: '&a=1&&b=2&' })).toBe(await fp({ query: 'a=1&b=2' }));
      expect(await fp({ query: 'a' })).toBe(await fp({ query: 'a=' }));
      expect(await fp({ query: '' })).not.toBe(await fp({ query: 'a' }));
    });
  });

  describe('B.4 rule 14: media type', () => {
    it('B.4 rule 14: only the lower-cased essence counts; parameters are dropped', async () => {
      const plain = await fp();
      expect(await fp({ contentType: 'Application/JSON; charset=utf-8' })).toBe(plain);
      expect(await fp({ contentType: ' application/json ;charset="UTF-8"' })).toBe(plain);
    });

    it('B.4 rule 14: an absent Content-Type differs from any present one', async () => {
      expect(await fp({ contentType: undefined })).not.toBe(await fp({ contentType: 'text/plain' }));
    });
  });

  describe('B.4 rule 15: JSON bodies (lossless by default)', () => {
    it('B.4 rule 15: member order and whitespace do not change it', async () => {
      const a = await json('{"amount":100,"currency":"eur","meta":{"x":[1,{"b":2,"a":1}],"y":null}}');
      const b = await json(
        ' {\n\t"meta" : { "y" : null , "x" : [ 1 , { "a" : 1 , "b" : 2 } ] },\r\n "currency":"eur", "amount":100 } ',
      );
      expect(b).toBe(a);
    });

    it('B.4 rule 15: array order matters', async () => {
      expect(await json('[1,2]')).not.toBe(await json('[2,1]'));
    });

    it('B.4 rule 15: number tokens are kept as written: 1 and 1.0 differ', async () => {
      expect(await json('{"amount":1}')).not.toBe(await json('{"amount":1.0}'));
      expect(await json('{"amount":100}')).not.toBe(await json('{"amount":1e2}'));
    });

    it('B.4 rule 15: 9007199254740993 and 9007199254740992 differ (lossless), are equal in jcs mode', async () => {
      const big = '{"amount":9007199254740993}';
      const near = '{"amount":9007199254740992}';
      expect(await json(big)).not.toBe(await json(near));
      expect(await json(big, { json: 'jcs' })).toBe(await json(near, { json: 'jcs' }));
      expect(await json('{"amount":1.0}', { json: 'jcs' })).toBe(await json('{"amount":1}', { json: 'jcs' }));
    });

    it('B.4 rule 15: strings are decoded: "\\u0041" equals "A", in values and member names', async () => {
      expect(await json('{"k":"\\u0041"}')).toBe(await json('{"k":"A"}'));
      expect(await json('{"\\u006b":"\\/"}')).toBe(await json('{"k":"/"}'));
      expect(await json('{"k":"\\ud83d\\ude00"}')).toBe(await json('{"k":"\ud83d\ude00"}'));
    });

    it('B.4 rule 15: duplicate member names are kept, in their original order', async () => {
      const ab = await json('{"a":1,"a":2}');
      expect(await json('{"a":2,"a":1}')).not.toBe(ab);
      expect(await json('{"a":2}')).not.toBe(ab);
      expect(await json('{ "a" : 1 , "a" : 2 }')).toBe(ab);
    });

    it('B.4 rule 15: */*+json media types are canonicalised too', async () => {
      const type = 'application/vnd.api+json';
      const sorted = await json('{"a":2,"b":1}', { contentType: type });
      expect(await json('{"b":1,"a":2}', { contentType: type })).toBe(sorted);
    });

    it('B.4 rule 15: other media types use raw bytes, even for JSON-looking text', async () => {
      const type = 'text/plain';
      const sorted = await json('{"a":2,"b":1}', { contentType: type });
      expect(await json('{"b":1,"a":2}', { contentType: type })).not.toBe(sorted);
      expect(await json('{"a":1}', { contentType: 'application/jsonx' })).not.toBe(
        await json('{ "a":1}', { contentType: 'application/jsonx' }),
      );
    });

    it('B.4 rule 15: a body that is not valid JSON falls back to raw bytes', async () => {
      expect(await json('{"a":1,}')).not.toBe(await json('{"a":1, }'));
      expect(await json('{"a":1,}')).toBe(await json('{"a":1,}'));
      expect(await json('\ufeff{"a":1}')).not.toBe(await json('\ufeff{ "a":1}'));
      const invalidUtf8 = Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]);
      const otherInvalid = Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xfe, 0x22, 0x7d]);
      expect(await fp({ body: invalidUtf8 })).not.toBe(await fp({ body: otherInvalid }));
    });

    it('B.4 rule 15: json "raw-bytes" digests the bytes as sent', async () => {
      expect(await json('{"a":1}', { json: 'raw-bytes' })).not.toBe(await json('{ "a":1}', { json: 'raw-bytes' }));
      expect(await json('{"a":1}', { json: 'raw-bytes' })).toBe(await json('{"a":1}', { json: 'raw-bytes' }));
    });

    it('B.4 rule 15: an empty body differs from {}, and undefined equals an empty buffer', async () => {
      const empty = await fp({ body: Buffer.alloc(0) });
      expect(await fp({ body: undefined })).toBe(empty);
      expect(await json('{}')).not.toBe(empty);
      expect(await json('""')).not.toBe(empty);
    });
  });

  describe('B.4 rule 15: application/x-www-form-urlencoded bodies', () => {
    const form = (text: string): Promise<string> =>
      fp({ contentType: 'application/x-www-form-urlencoded', body: Buffer.from(text) });

    it('B.4 rule 15: the order of different names is irrelevant', async () => {
      expect(await form('amount=100&currency=eur')).toBe(await form('currency=eur&amount=100'));
    });

    it('B.4 rule 15: the order of repeated values is relevant', async () => {
      expect(await form('tag=a&tag=b')).not.toBe(await form('tag=b&tag=a'));
      expect(await form('tag=a&x=1&tag=b')).toBe(await form('x=1&tag=a&tag=b'));
    });

    it('B.4 rule 15: percent-decoding and "+" apply, charset parameters do not matter', async () => {
      expect(await form('note=a+b%21')).toBe(await form('note=a%20b!'));
      const charset = await fp({
        contentType: 'application/x-www-form-urlencoded; charset=UTF-8',
        body: Buffer.from('note=a+b%21'),
      });
      expect(charset).toBe(await form('note=a+b%21'));
      expect(await form('note=a%2Bb')).not.toBe(await form('note=a+b'));
    });

    it('B.4 rule 15: a value with an invalid escape is kept whole: to=%zz%41 differs from to=%zzA', async () => {
      expect(await form('to=%zz%41')).not.toBe(await form('to=%zzA'));
      expect(await form('to=a+%zz')).not.toBe(await form('to=a%20%zz'));
    });

    it('B.4 rule 15: bytes that are not UTF-8 are compared as sent', async () => {
      const bytes = (byte: number) =>
        fp({ contentType: 'application/x-www-form-urlencoded', body: Buffer.from([0x61, 0x3d, byte]) });
      expect(await bytes(0xff)).not.toBe(await bytes(0xfe));
    });

    it('B.4 rule 15: a form body and the same text in the query are different requests', async () => {
      const inQuery = await fp({ query: 'a=1', contentType: 'application/x-www-form-urlencoded', body: undefined });
      expect(await form('a=1')).not.toBe(inQuery);
    });
  });

  describe('B.4 rule 15: multipart/form-data bodies', () => {
    it('B.4 rule 15: the boundary does not change it', async () => {
      const first = await fp(multipart('----formdata-a1', formParts));
      expect(first).toBe(await fp(multipart('XyZ0123456789', formParts)));
    });

    it('B.4 rule 15: each part\u2019s name, filename, content type and content count', async () => {
      const original = await fp(multipart('b', formParts));
      const [field, file] = formParts;
      const variants: Array<Array<[string[], string | Buffer]>> = [
        [[['Content-Disposition: form-data; name="amount2"'], '100'], file],
        [[['Content-Disposition: form-data; name="amount"'], '101'], file],
        [[['Content-Disposition: form-data; name="amount"', 'Content-Type: application/json'], '100'], file],
        [field, [['Content-Disposition: form-data; name="receipt"; filename="receipt.pdf"', file[0][1]], file[1]]],
        [field, [[file[0][0], 'Content-Type: image/png'], file[1]]],
        [field, [file[0], Buffer.from([0x25, 0x50, 0x44, 0x46, 0x00, 0xfe])]],
        [field, [['Content-Disposition: form-data; name="receipt"', 'Content-Type: application/pdf'], file[1]]],
        [file, field],
        [field],
      ];
      const seen = new Set([original]);
      for (const parts of variants) seen.add(await fp(multipart('b', parts)));
      expect(seen.size).toBe(variants.length + 1);
    });

    it('B.4 rule 15: field bytes are compared exactly (no lossy charset decoding)', async () => {
      const withByte = (byte: number): Promise<string> =>
        fp(multipart('b', [[['Content-Disposition: form-data; name="n"'], Buffer.from([0x61, byte])]]));
      expect(await withByte(0xff)).not.toBe(await withByte(0xfe));
      const binaryField: Array<[string[], string | Buffer]> = [
        [['Content-Disposition: form-data; name="n"'], Buffer.from([0xff, 0xfe])],
      ];
      expect(await fp(multipart('b1', binaryField))).toBe(await fp(multipart('b2', binaryField)));
    });

    it('B.4 rule 15: a field whose declared charset loses bytes falls back to raw bytes', async () => {
      const utf8Field = (byte: number): Partial<FingerprintInput> =>
        multipart('b', [
          [
            ['Content-Disposition: form-data; name="n"', 'Content-Type: text/plain; charset=utf-8'],
            Buffer.from([0x61, byte]),
          ],
        ]);
      expect(await fp(utf8Field(0xff))).not.toBe(await fp(utf8Field(0xfe)));
    });

    it('B.4 rule 15: a malformed multipart body falls back to raw bytes (the boundary then counts)', async () => {
      const truncated = (boundary: string): Partial<FingerprintInput> => {
        const whole = multipart(boundary, formParts);
        return { ...whole, body: whole.body!.subarray(0, whole.body!.length - `--${boundary}--\r\n`.length) };
      };
      expect(await fp(truncated('a1'))).not.toBe(await fp(truncated('b2')));
      expect(await fp(truncated('a1'))).toBe(await fp(truncated('a1')));
      const noBoundary = { contentType: 'multipart/form-data', body: multipart('x', formParts).body };
      expect(await fp(noBoundary)).not.toBe(await fp({ ...noBoundary, body: multipart('y', formParts).body }));
    });
  });

  describe('B.4 rule 15: a parsed body whose bytes are gone', () => {
    const parsed = (fields: unknown, files?: UploadedFileDigest[]) =>
      fp({ contentType: 'multipart/form-data; boundary=x', body: undefined, parsedBody: { fields, files } });
    const file = (overrides: Partial<UploadedFileDigest> = {}): UploadedFileDigest => ({
      field: 'receipt',
      filename: 'receipt.pdf',
      mimeType: 'application/pdf',
      encoding: '7bit',
      sha256: Buffer.alloc(32, 1),
      ...overrides,
    });

    it('B.4 rule 15: member order does not matter; values, their types and array order do', async () => {
      const value = { amount: '100', tags: ['a', 'b'], nested: { x: '1' } };
      expect(await parsed(value)).toBe(await parsed({ nested: { x: '1' }, tags: ['a', 'b'], amount: '100' }));
      expect(await parsed(Object.assign(Object.create(null), value))).toBe(await parsed(value));
      expect(await parsed({ ...value, amount: 100 })).not.toBe(await parsed(value));
      expect(await parsed({ ...value, tags: ['b', 'a'] })).not.toBe(await parsed(value));
      expect(await parsed({ ...value, tags: 'a,b' })).not.toBe(await parsed(value));
      expect(await parsed({ ...value, extra: undefined })).not.toBe(await parsed(value));
      expect(await parsed({ a: null })).not.toBe(await parsed({ a: 'null' }));
      expect(await parsed({ a: -0 })).not.toBe(await parsed({ a: 0 }));
    });

    it('B.4 rule 15: each file counts by field, filename, content type, encoding and content, in order', async () => {
      const original = await parsed({ note: 'x' }, [file(), file({ field: 'other' })]);
      const variants: UploadedFileDigest[][] = [
        [file({ sha256: Buffer.alloc(32, 2) }), file({ field: 'other' })],
        [file({ filename: 'receipt-2.pdf' }), file({ field: 'other' })],
        [file({ filename: undefined }), file({ field: 'other' })],
        [file({ mimeType: 'image/png' }), file({ field: 'other' })],
        [file({ encoding: '8bit' }), file({ field: 'other' })],
        [file({ field: 'other' }), file()],
        [file()],
      ];
      const seen = new Set([original]);
      for (const files of variants) seen.add(await parsed({ note: 'x' }, files));
      expect(seen.size).toBe(variants.length + 1);
      expect(await parsed({ note: 'x' })).toBe(await parsed({ note: 'x' }, []));
    });

    it('B.4 rule 15: the raw bytes win over a parsed body, and a parsed body differs from no body', async () => {
      const raw = { contentType: 'application/x-www-form-urlencoded', body: Buffer.from('a=1') };
      expect(await fp({ ...raw, parsedBody: { fields: { a: '2' } } })).toBe(await fp(raw));
      expect(await fp({ body: undefined, parsedBody: { fields: {} } })).not.toBe(await fp({ body: undefined }));
    });

    it('B.4 rule 15: a value it cannot encode exactly is refused, never skipped', async () => {
      await expect(parsed({ at: new Date(0) })).rejects.toThrow(/instance of Date cannot be fingerprinted/);
      await expect(parsed({ run: () => 1 })).rejects.toThrow(TypeError);
      const deep: Record<string, unknown> = {};
      let cursor = deep;
      for (let i = 0; i < 1100; i++) cursor = cursor.next = {} as Record<string, unknown>;
      await expect(parsed(deep)).rejects.toThrow(/deeper than 1000 levels/);
    });
  });

  describe('B.4 rule 15: anything else', () => {
    it('B.4 rule 15: other media types digest the raw bytes', async () => {
      const octets = { contentType: 'application/octet-stream' };
      const bytes = (...values: number[]): Promise<string> => fp({ ...octets, body: Buffer.from(values) });
      expect(await bytes(1, 2, 3)).not.toBe(await bytes(1, 2, 4));
      expect(await bytes(1, 2, 3)).toBe(await bytes(1, 2, 3));
    });
  });
});

describe('canonicalizeJson', () => {
  it('RFC 8785 §3.2.2: serialises the example of the RFC exactly in jcs mode', () => {
    const input =
      '{\n  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],\n' +
      '  "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",\n  "literals": [null, true, false]\n}';
    expect(canonicalizeJson(input, 'jcs')).toBe(
      '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],' +
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
    );
    expect(canonicalizeJson(input, 'lossless')).toBe(
      '{"literals":[null,true,false],"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],' +
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
    );
  });

  it('RFC 8785 §3.2.3: sorts member names by UTF-16 code units', () => {
    const input =
      '{"\\u20ac":"Euro Sign","\\r":"Carriage Return","\\ufb33":"Hebrew Letter Dalet With Dagesh",' +
      '"1":"One","\\ud83d\\ude00":"Emoji: Grinning Face","\\u0080":"Control",' +
      '"\\u00f6":"Latin Small Letter O With Diaeresis"}';
    const head = '{"\\r":"Carriage Return","1":"One","\u0080":"Control"';
    expect(canonicalizeJson(input, 'lossless').startsWith(head)).toBe(true);
    expect(JSON.parse(canonicalizeJson(input, 'jcs'))).toEqual(JSON.parse(input));
    const order = [...canonicalizeJson(input, 'jcs').matchAll(/"([^"]*)":"([^"]*)"/g)].map((m) => m[2]);
    expect(order).toEqual([
      'Carriage Return',
      'One',
      'Control',
      'Latin Small Letter O With Diaeresis',
      'Euro Sign',
      'Emoji: Grinning Face',
      'Hebrew Letter Dalet With Dagesh',
    ]);
  });

  it('RFC 8785 §3.2.2.2: escapes only what JCS escapes, with lower-case hex', () => {
    expect(canonicalizeJson('"\\u0000\\u001F\\b\\f\\n\\r\\t\\u0022\\u005C\\/\\u007f\\u00e9"', 'lossless')).toBe(
      '"\\u0000\\u001f\\b\\f\\n\\r\\t\\"\\\\/\u007f\u00e9"',
    );
    expect(canonicalizeJson('"\\uDC00x\\uD800"', 'lossless')).toBe('"\\udc00x\\ud800"');
    expect(canonicalizeJson('"\udc00"', 'lossless')).toBe('"\\udc00"');
  });

  it('keeps number tokens as written in lossless mode and normalises them in jcs mode', () => {
    const numbers = '[-0, 1E+2, 0.10, 1e-7, 9007199254740993]';
    expect(canonicalizeJson(numbers, 'lossless')).toBe('[-0,1E+2,0.10,1e-7,9007199254740993]');
    expect(canonicalizeJson(numbers, 'jcs')).toBe('[0,100,0.1,1e-7,9007199254740992]');
  });

  it('keeps duplicate member names in their original order (stable sort)', () => {
    expect(canonicalizeJson('{"b":0,"a":2,"c":0,"a":1,"a":3}', 'lossless')).toBe('{"a":2,"a":1,"a":3,"b":0,"c":0}');
  });

  it('canonicalises top-level scalars and empty containers', () => {
    expect(canonicalizeJson(' 12 ', 'lossless')).toBe('12');
    expect(canonicalizeJson('"x"', 'lossless')).toBe('"x"');
    expect(canonicalizeJson('\t\r\n true', 'lossless')).toBe('true');
    expect(canonicalizeJson('[ { } , [ ] , null , false ]', 'lossless')).toBe('[{},[],null,false]');
  });

  it('is idempotent and preserves the parsed value', () => {
    const samples = [
      '{"z":{"y":[1,2,{"x":"\\u00e9\\n"}]},"a":[],"m":{"\\u0000":"nul","":""}}',
      '[{"b":true,"a":false},{"d":null,"c":-1.5e-3}]',
      '{"emoji":"\ud83d\ude00","tab":"\\t","quote":"\\"","slash":"\\/"}',
    ];
    for (const sample of samples) {
      const once = canonicalizeJson(sample, 'lossless');
      expect(canonicalizeJson(once, 'lossless')).toBe(once);
      expect(JSON.parse(once)).toEqual(JSON.parse(sample));
    }
  });

  it.each([
    ['', 'empty input'],
    ['{', 'an unclosed object'],
    ['[1,]', 'a trailing comma in an array'],
    ['{"a":1,}', 'a trailing comma in an object'],
    ['{"a" 1}', 'a missing colon'],
    ['{a:1}', 'an unquoted name'],
    ['{"a":1}}', 'data after the value'],
    ['1 2', 'two values'],
    ['[1 2]', 'a missing comma'],
    ['01', 'a leading zero'],
    ['1.', 'a missing fraction'],
    ['.5', 'a missing integer part'],
    ['+1', 'a plus sign'],
    ['- 1', 'a space after the minus'],
    ['1e', 'an empty exponent'],
    ['1e+', 'an exponent without digits'],
    ['NaN', 'NaN'],
    ['tru', 'a truncated literal'],
    ["'a'", 'single quotes'],
    ['"abc', 'an unterminated string'],
    ['"a\u0001"', 'a raw control character'],
    ['"\\x"', 'an invalid escape'],
    ['"\\u12G4"', 'an invalid \\u escape'],
    ['"\\u12"', 'a short \\u escape'],
    ['\ufeff{}', 'a byte order mark'],
    ['\u00a0{}', 'non-JSON whitespace'],
  ])('throws SyntaxError on %j (%s)', (text) => {
    expect(() => canonicalizeJson(text, 'lossless')).toThrow(SyntaxError);
  });

  it('throws SyntaxError in jcs mode when a number overflows a double', () => {
    expect(canonicalizeJson('1e400', 'lossless')).toBe('1e400');
    expect(() => canonicalizeJson('1e400', 'jcs')).toThrow(SyntaxError);
  });

  it('accepts 1000 levels of nesting and rejects 1001, without stack overflow for far deeper input', () => {
    expect(canonicalizeJson(`${'['.repeat(1000)}${']'.repeat(1000)}`, 'lossless')).toHaveLength(2000);
    expect(canonicalizeJson(`${'{"a":'.repeat(999)}[]${'}'.repeat(999)}`, 'lossless')).toHaveLength(999 * 6 + 2);
    expect(() => canonicalizeJson(`${'['.repeat(1001)}${']'.repeat(1001)}`, 'lossless')).toThrow(/deeper than 1000/);
    expect(() => canonicalizeJson('['.repeat(200_000), 'lossless')).toThrow(SyntaxError);
  });

  it('handles large payloads in one pass', () => {
    const members = Array.from({ length: 50_000 }, (_, i) => `"k${(i * 7919) % 50_000}":{"v":[${i},"s\\u00e9${i}"]}`);
    const text = `{${members.join(', ')}}`;
    const canonical = canonicalizeJson(text, 'lossless');
    expect(JSON.parse(canonical)).toEqual(JSON.parse(text));
    expect(canonical.startsWith('{"k0":')).toBe(true);
  });
});
