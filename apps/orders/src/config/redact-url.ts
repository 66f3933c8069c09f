/** A URL with its password replaced by `***`, for logs and messages. */
export function redactUrl(raw: string): string {
  try {
    const url = new URL(raw);
    if (url.password === '') {
      return raw;
    }
    url.password = '***';
    return url.toString();
  } catch {
    return '<unparsable URL>';
  }
}
