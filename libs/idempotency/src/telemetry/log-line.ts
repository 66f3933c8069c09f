/** A field of a log line; `undefined` fields are left out. */
export type LogFieldValue = string | number | boolean | undefined;

/**
 * One log line: a readable message, then `name=value` fields (logfmt), so the line stays one line
 * and stays greppable with any Nest logger, the console one included. Values with spaces, quotes
 * or `=` are quoted; line breaks are escaped, so a value cannot start a forged line.
 *
 * @example
 * formatLogLine('takeover of a dead lease', { event: 'takeover', keyHash: 'ab12', operation: 'POST /orders' })
 * // 'takeover of a dead lease event=takeover keyHash=ab12 operation="POST /orders"'
 */
export function formatLogLine(message: string, fields: Record<string, LogFieldValue>): string {
  const parts = [message];
  for (const [name, value] of Object.entries(fields)) {
    if (value === undefined) continue;
    parts.push(`${name}=${formatValue(String(value))}`);
  }
  return parts.join(' ');
}

function formatValue(value: string): string {
  if (value !== '' && !/[\s"=\\]/.test(value)) return value;
  return JSON.stringify(value);
}
