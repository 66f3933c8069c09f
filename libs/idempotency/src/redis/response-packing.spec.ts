import { deflateRawSync } from 'node:zlib';
import { packResponse, unpackResponse } from './response-packing.js';

const ORDER = Buffer.from(
  JSON.stringify({
    id: '5f0c6f7e-8a51-4a4f-9a3e-2b7d2c8e1f00',
    customerId: '0b6b9c0e-2f4d-4d7a-9a77-5d1c7f3b8e21',
    status: 'confirmed',
    currency: 'EUR',
    items: [{ sku: 'SKU-1001', quantity: 2, unitPriceCents: 1999 }],
    totalCents: 3998,
    createdAt: '2026-11-22T21:55:00.000Z',
  }),
);
const HEADERS = JSON.stringify({
  'content-type': 'application/json; charset=utf-8',
  location: '/orders/5f0c6f7e-8a51-4a4f-9a3e-2b7d2c8e1f00',
  etag: 'W/"12c-hRHsEgdu8AZgWfBbyzCrl0WVcdk"',
});

describe('response packing (Redis record compression)', () => {
  it('packs a JSON order and its headers into fewer bytes, and unpacks them exactly', () => {
    const packed = packResponse(HEADERS, ORDER)!;
    expect(packed.length).toBeLessThan((HEADERS.length + ORDER.length) * 0.7);
    const { headers, body } = unpackResponse(packed);
    expect(headers.toString('utf8')).toBe(HEADERS);
    expect(body.equals(ORDER)).toBe(true);
  });

  it('keeps binary bodies and non-ASCII headers byte for byte', () => {
    const binary = Buffer.from(Array.from({ length: 600 }, (_, i) => (i * 7) % 256));
    const headers = JSON.stringify({
      'content-disposition': 'attachment; filename="reçu ✓.pdf"',
      'x-pad': 'a'.repeat(200),
    });
    const { headers: h, body } = unpackResponse(packResponse(headers, binary)!);
    expect(h.toString('utf8')).toBe(headers);
    expect(body.equals(binary)).toBe(true);
  });

  it('unpacks a response many times larger than its compressed form, whole (output in several chunks)', () => {
    const rows = Array.from({ length: 2_000 }, (_, i) => ({ sku: `SKU-${i % 7}`, quantity: 1, unitPriceCents: 1999 }));
    const large = Buffer.from(JSON.stringify({ items: rows }));
    const packed = packResponse(HEADERS, large)!;
    expect(large.length).toBeGreaterThan(16 * 1024 + packed.length * 4);
    const { headers, body } = unpackResponse(packed);
    expect(headers.toString('utf8')).toBe(HEADERS);
    expect(body.equals(large)).toBe(true);
  });

  it('packs a response without a body', () => {
    const headers = JSON.stringify({
      location: `/orders/${'5f0c6f7e-8a51-4a4f-9a3e-2b7d2c8e1f00'}`,
      'cache-control': 'no-store',
      'content-language': 'en',
      'x-powered-by': 'Express',
    });
    const { headers: h, body } = unpackResponse(packResponse(headers, undefined)!);
    expect(h.toString('utf8')).toBe(headers);
    expect(body).toHaveLength(0);
  });

  it('leaves small or incompressible responses as they are', () => {
    expect(packResponse('{"content-type":"application/json"}', Buffer.from('{"id":1}'))).toBeUndefined();
    const random = Buffer.from(Array.from({ length: 400 }, (_, i) => (i * 2654435761) % 251));
    expect(packResponse('{}', deflateRawSync(random))).toBeUndefined();
  });

  it('refuses a blob it did not write', () => {
    expect(() => unpackResponse(Buffer.from('not deflate at all'))).toThrow();
    expect(() => unpackResponse(deflateRawSync(Buffer.from([0, 0])))).toThrow();
    const packed = packResponse(HEADERS, ORDER)!;
    expect(() => unpackResponse(packed.subarray(0, packed.length - 5))).toThrow();
  });
});
