import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import { validationProblem } from '../common/validation/validation.pipe.js';

/** The request header that names the operator, for the audit log. */
export const ADMIN_ACTOR_HEADER = 'x-admin-actor';
const ACTOR = /^[\x21-\x7e](?:[\x20-\x7e]{0,198}[\x21-\x7e])?$/;

/**
 * Who is acting (`X-Admin-Actor`, 1–200 printable ASCII characters), as the audit log records
 * it. Required: a repair nobody owns is not audited.
 */
export const AdminActor = createParamDecorator((_data: unknown, context: ExecutionContext): string => {
  const headers = context
    .switchToHttp()
    .getRequest<{ headers: Record<string, string | string[] | undefined> }>().headers;
  const actor = headers[ADMIN_ACTOR_HEADER];
  if (typeof actor !== 'string' || !ACTOR.test(actor)) {
    throw validationProblem(
      [{ field: 'X-Admin-Actor', messages: ['X-Admin-Actor must name who acts: 1 to 200 printable ASCII characters'] }],
      'Send X-Admin-Actor with your name: the audit log records who released what.',
    );
  }
  return actor;
});
