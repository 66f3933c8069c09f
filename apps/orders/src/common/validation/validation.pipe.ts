import { type ArgumentMetadata, Injectable, ValidationPipe, type ValidationError } from '@nestjs/common';
import { type FieldError, ProblemException } from '../problem-details/problem-details.js';

/**
 * Flattens class-validator's error tree into one entry per invalid field, nested fields named
 * by their path (`items.0.quantity`). Pure, unit-tested.
 */
export function toFieldErrors(errors: ValidationError[], parent = ''): FieldError[] {
  return errors.flatMap((error) => {
    const field = parent === '' ? error.property : `${parent}.${error.property}`;
    const own: FieldError[] =
      error.constraints && Object.keys(error.constraints).length > 0
        ? [{ field, messages: Object.values(error.constraints) }]
        : [];
    return [...own, ...toFieldErrors(error.children ?? [], field)];
  });
}

/** The `validation-error` problem for a list of invalid fields. */
export function validationProblem(errors: FieldError[], detail?: string): ProblemException {
  const count = errors.length;
  return new ProblemException(
    'validation',
    detail ??
      `The request has ${count} invalid field${count === 1 ? '' : 's'}: ${errors.map((e) => e.field).join(', ')}.`,
    { errors },
  );
}

/**
 * The global validation pipe: only declared fields (`whitelist`, and unknown ones are an
 * error), no implicit type conversion (`"5"` is not a quantity), and a body that is not a JSON
 * object is a `validation-error` rather than a crash deeper down.
 */
@Injectable()
export class OrdersValidationPipe extends ValidationPipe {
  constructor() {
    super({
      whitelist: true,
      forbidNonWhitelisted: true,
      forbidUnknownValues: true,
      transform: true,
      transformOptions: { enableImplicitConversion: false },
      validationError: { target: false, value: false },
      exceptionFactory: (errors) => validationProblem(toFieldErrors(errors)),
    });
  }

  override async transform(value: unknown, metadata: ArgumentMetadata): Promise<unknown> {
    const isDto = typeof metadata.metatype === 'function' && this.toValidate(metadata);
    if (metadata.type === 'body' && isDto && (typeof value !== 'object' || value === null || Array.isArray(value))) {
      throw validationProblem(
        [{ field: '', messages: ['the request body must be a JSON object'] }],
        'The request body must be a JSON object.',
      );
    }
    return super.transform(value, metadata);
  }
}
