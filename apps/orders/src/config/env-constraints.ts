import { type ValidationArguments, ValidateBy } from 'class-validator';
import { redactUrl } from './redact-url.js';

/**
 * The class-validator constraints the environment schema needs and class-validator lacks. Each
 * message names the variable and says what it accepts; none quotes a secret (URLs are shown with
 * their password masked).
 */

function describeUrl(raw: unknown): string {
  const redacted = redactUrl(String(raw));
  return redacted === '<unparsable URL>' ? 'a value that is not a URL' : `"${redacted}"`;
}

function protocolOf(raw: unknown): string | undefined {
  try {
    return new URL(String(raw)).protocol;
  } catch {
    return undefined;
  }
}

/** `a, b or c`. */
function listOf(items: string[]): string {
  return items.length === 1 ? items[0] : `${items.slice(0, -1).join(', ')} or ${items.at(-1)}`;
}

/** A whole number written in decimal digits, from `min` to `max` (`1e3`, `3000.5`, `-1` are refused). */
export const IsIntegerString = (min: number, max: number): PropertyDecorator =>
  ValidateBy({
    name: 'isIntegerString',
    validator: {
      validate: (value: unknown) => /^\d{1,9}$/.test(String(value)) && Number(value) >= min && Number(value) <= max,
      defaultMessage: ({ property, value }: ValidationArguments) =>
        `${property} must be an integer from ${min} to ${max} (got "${String(value)}")`,
    },
  });

/** A URL whose scheme is one of `schemes` (`['redis', 'rediss']`); the message masks its password. */
export const IsUrlWithScheme = (schemes: [string, string, ...string[]]): PropertyDecorator =>
  ValidateBy({
    name: 'isUrlWithScheme',
    validator: {
      validate: (value: unknown) => schemes.some((scheme) => protocolOf(value) === `${scheme}:`),
      defaultMessage: ({ property, value }: ValidationArguments) =>
        `${property} must be ${/^[aeiou]/.test(schemes[0]) ? 'an' : 'a'} ${listOf(schemes.map((scheme) => `${scheme}://`))} URL (got ${describeUrl(value)})`,
    },
  });

/** An absolute URI ending with `/` (the base every problem `type` is appended to). */
export const IsBaseUri = (): PropertyDecorator =>
  ValidateBy({
    name: 'isBaseUri',
    validator: {
      validate: (value: unknown) => protocolOf(value) !== undefined && String(value).endsWith('/'),
      defaultMessage: ({ property, value }: ValidationArguments) =>
        `${property} must be an absolute URI ending with "/" (got "${String(value)}")`,
    },
  });

/** Set only together with `other` (`DATABASE_SCHEMA` means nothing without `DATABASE_URL`). */
export const Requires = (other: string, why = ''): PropertyDecorator =>
  ValidateBy({
    name: 'requires',
    validator: {
      validate: (_value: unknown, { object }: ValidationArguments) =>
        (object as Record<string, unknown>)[other] !== undefined,
      defaultMessage: ({ property }: ValidationArguments) => `${property} needs ${other}${why}`,
    },
  });

/** Set only when `other` is a URL of one of `schemes` (`DATABASE_SCHEMA` is PostgreSQL's). */
export const RequiresScheme = (other: string, schemes: string[], why = ''): PropertyDecorator =>
  ValidateBy({
    name: 'requiresScheme',
    validator: {
      validate: (_value: unknown, { object }: ValidationArguments) => {
        const protocol = protocolOf((object as Record<string, unknown>)[other]);
        return protocol === undefined || schemes.some((scheme) => protocol === `${scheme}:`);
      },
      defaultMessage: ({ property }: ValidationArguments) =>
        `${property} needs a ${listOf(schemes.map((scheme) => `${scheme}://`))} ${other}${why}`,
    },
  });
