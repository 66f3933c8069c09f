import { checkWebhookSignature, signWebhookBody } from './webhook-signature.js';

describe('webhook signatures', () => {
  const secret = 'whsec_test_0123456789';
  const body = Buffer.from('{"id":"evt_1","type":"payment.settled","data":{"paymentId":"p"}}');

  it('signs with hex HMAC-SHA256 of the raw bytes', () => {
    // printf '%s' "$BODY" | openssl dgst -sha256 -hmac "$SECRET": the README's curl example.
    expect(signWebhookBody('abc', 'key')).toBe(
      'sha256=9c196e32dc0175f86f4b1cb89289d6619de6bee699e4c378e68309ed97a1a6ab',
    );
  });

  it('accepts the signature of the exact bytes, in either case, with surrounding spaces', () => {
    const signature = signWebhookBody(body, secret);
    expect(checkWebhookSignature(body, signature, secret)).toBe('valid');
    expect(checkWebhookSignature(body, ` ${signature.toUpperCase().replace('SHA256=', 'sha256=')} `, secret)).toBe(
      'valid',
    );
  });

  it('refuses another body, another secret, a truncated or repeated signature', () => {
    const signature = signWebhookBody(body, secret);
    const reformatted = Buffer.from(JSON.stringify(JSON.parse(body.toString()), null, 1));
    expect(checkWebhookSignature(reformatted, signature, secret)).toBe('mismatch');
    expect(checkWebhookSignature(body, signWebhookBody(body, 'another-secret-000'), secret)).toBe('mismatch');
    expect(checkWebhookSignature(body, signature.slice(0, -2), secret)).toBe('malformed');
    expect(checkWebhookSignature(body, [signature, signature], secret)).toBe('malformed');
    expect(checkWebhookSignature(body, `sha1=${signature.slice(7)}`, secret)).toBe('malformed');
  });

  it('reports a missing or empty header as missing', () => {
    expect(checkWebhookSignature(body, undefined, secret)).toBe('missing');
    expect(checkWebhookSignature(body, ' ', secret)).toBe('missing');
  });
});
