import { newOwnerToken, sameToken } from './owner-token.js';

describe('newOwnerToken', () => {
  it('is 22 base64url characters encoding 16 bytes', () => {
    const token = newOwnerToken();
    expect(token).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(Buffer.from(token, 'base64url')).toHaveLength(16);
  });

  it('does not repeat across 10,000 tokens', () => {
    const tokens = new Set(Array.from({ length: 10_000 }, newOwnerToken));
    expect(tokens.size).toBe(10_000);
  });
});

describe('sameToken', () => {
  it('is true only for identical tokens', () => {
    const token = newOwnerToken();
    expect(sameToken(token, `${token}`)).toBe(true);
    expect(sameToken(token, newOwnerToken())).toBe(false);
  });

  it('detects a difference in any position, and in case', () => {
    const token = 'AAAAAAAAAAAAAAAAAAAAAA';
    for (let i = 0; i < token.length; i++) {
      expect(sameToken(token, `${token.slice(0, i)}B${token.slice(i + 1)}`)).toBe(false);
    }
    expect(sameToken('abcdefghijklmnopqrstuv', 'ABCDEFGHIJKLMNOPQRSTUV')).toBe(false);
  });

  it('is false, without throwing, for different lengths and empty strings', () => {
    const token = newOwnerToken();
    expect(sameToken(token, token.slice(0, 21))).toBe(false);
    expect(sameToken(token, `${token}x`)).toBe(false);
    expect(sameToken('', token)).toBe(false);
    expect(sameToken('', '')).toBe(true);
  });

  it('compares strings with non-ASCII characters by their bytes', () => {
    expect(sameToken('\u00e9', 'e\u0301')).toBe(false);
    expect(sameToken('\u00e9t\u00e9', '\u00e9t\u00e9')).toBe(true);
  });
});
