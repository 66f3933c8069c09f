import { formatLogLine } from './log-line.js';

describe('formatLogLine', () => {
  it('appends name=value fields after the message and leaves undefined ones out', () => {
    expect(
      formatLogLine('lost claim', { event: 'lost_lease', keyHash: 'ab12', fencing: 2, tenant: undefined, ok: false }),
    ).toBe('lost claim event=lost_lease keyHash=ab12 fencing=2 ok=false');
  });

  it('quotes values with spaces, quotes, = or backslashes, and empty values', () => {
    expect(formatLogLine('m', { operation: 'POST /orders', weird: 'a="b"', empty: '' })).toBe(
      'm operation="POST /orders" weird="a=\\"b\\"" empty=""',
    );
  });

  it('keeps the line one line: a value cannot start a forged line', () => {
    const line = formatLogLine('store error', { error: 'boom\nevent=takeover keyHash=forged' });
    expect(line.split('\n')).toHaveLength(1);
    expect(line).toBe('store error error="boom\\nevent=takeover keyHash=forged"');
  });
});
