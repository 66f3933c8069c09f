import { isAdminBearer } from './admin-token.js';

describe('isAdminBearer', () => {
  const token = 'adm_0123456789abcdef0123456789abcdef';

  it('accepts exactly "Bearer <token>", the scheme in any case', () => {
    expect(isAdminBearer(`Bearer ${token}`, token)).toBe(true);
    expect(isAdminBearer(`bearer ${token}`, token)).toBe(true);
  });

  it('refuses a missing field, another token, another scheme, a bare token and a repeated field', () => {
    expect(isAdminBearer(undefined, token)).toBe(false);
    expect(isAdminBearer(`Bearer ${token}0`, token)).toBe(false);
    expect(isAdminBearer(`Bearer ${token.slice(1)}`, token)).toBe(false);
    expect(isAdminBearer(`Basic ${token}`, token)).toBe(false);
    expect(isAdminBearer(token, token)).toBe(false);
    expect(isAdminBearer('Bearer ', token)).toBe(false);
    expect(isAdminBearer([`Bearer ${token}`, `Bearer ${token}`], token)).toBe(false);
  });
});
