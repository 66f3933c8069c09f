import type { ValidationError } from '@nestjs/common';
import { toFieldErrors, validationProblem } from './validation.pipe.js';

const error = (
  property: string,
  constraints?: Record<string, string>,
  children: ValidationError[] = [],
): ValidationError => ({
  property,
  constraints,
  children,
});

describe('toFieldErrors', () => {
  it('names nested fields by their path and keeps every message', () => {
    const errors = [
      error('currency', { isIn: 'currency must be one of the following values: USD, EUR, GBP' }),
      error('items', undefined, [
        error('0', undefined, [
          error('quantity', { min: 'quantity must not be less than 1', isInt: 'quantity must be an integer number' }),
        ]),
        error('2', undefined, [error('color', { whitelistValidation: 'property color should not exist' })]),
      ]),
    ];
    expect(toFieldErrors(errors)).toEqual([
      { field: 'currency', messages: ['currency must be one of the following values: USD, EUR, GBP'] },
      {
        field: 'items.0.quantity',
        messages: ['quantity must not be less than 1', 'quantity must be an integer number'],
      },
      { field: 'items.2.color', messages: ['property color should not exist'] },
    ]);
  });

  it('lists a field with its own error and its children', () => {
    expect(
      toFieldErrors([
        error('items', { arrayMaxSize: 'items must contain no more than 100 elements' }, [error('0', { nested: 'x' })]),
      ]),
    ).toEqual([
      { field: 'items', messages: ['items must contain no more than 100 elements'] },
      { field: 'items.0', messages: ['x'] },
    ]);
  });
});

describe('validationProblem', () => {
  it('builds a validation-error problem whose detail names the fields', () => {
    const problem = validationProblem([
      { field: 'currency', messages: ['bad'] },
      { field: 'items.0.sku', messages: ['bad'] },
    ]);
    expect(problem.getStatus()).toBe(400);
    expect(problem.getResponse()).toEqual({
      type: 'validation-error',
      title: 'Request validation failed',
      status: 400,
      detail: 'The request has 2 invalid fields: currency, items.0.sku.',
      code: 'validation_error',
      errors: [
        { field: 'currency', messages: ['bad'] },
        { field: 'items.0.sku', messages: ['bad'] },
      ],
    });
  });
});
