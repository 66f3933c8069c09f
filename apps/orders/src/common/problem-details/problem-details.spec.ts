import {
  BadRequestException,
  HttpException,
  HttpStatus,
  NotFoundException,
  PayloadTooLargeException,
  ServiceUnavailableException,
} from '@nestjs/common';
import { isProblemDetails, ProblemException, toProblemResponse } from './problem-details.js';

const BASE = 'https://api.example.com/problems/';

describe('toProblemResponse', () => {
  it('prefixes the base URI to our own problems and keeps their extensions', () => {
    const errors = [{ field: 'currency', messages: ['currency must be one of the following values: USD, EUR, GBP'] }];
    const result = toProblemResponse(
      new ProblemException('validation', 'The request has 1 invalid field: currency.', { errors }),
      BASE,
    );
    expect(result).toEqual({
      status: 400,
      unexpected: false,
      body: {
        type: `${BASE}validation-error`,
        title: 'Request validation failed',
        status: 400,
        detail: 'The request has 1 invalid field: currency.',
        code: 'validation_error',
        errors,
      },
    });
  });

  it('sends a problem body built elsewhere (the idempotency library) unchanged, with its status', () => {
    const body = {
      type: 'https://api.example.com/problems/idempotency-request-in-progress',
      title: 'A request is outstanding for this Idempotency-Key',
      status: 409,
      detail: 'Retry later with the same key and the same payload.',
      code: 'idempotency_request_in_progress',
    };
    const result = toProblemResponse(new HttpException(body, 409), BASE);
    expect(result).toEqual({ status: 409, body, unexpected: false });
  });

  it('maps a body-parser JSON error to invalid-json without echoing the parser message', () => {
    const cause = Object.assign(new SyntaxError('Unexpected token } in JSON at position 9'), {
      type: 'entity.parse.failed',
      status: 400,
    });
    const result = toProblemResponse(new BadRequestException(cause.message, { cause }), BASE);
    expect(result.status).toBe(400);
    expect(result.body).toEqual({
      type: `${BASE}invalid-json`,
      title: 'Request body is not valid JSON',
      status: 400,
      detail: 'The request body could not be parsed as JSON.',
      code: 'invalid_json',
    });
  });

  it('maps the router 404 to not-found', () => {
    const result = toProblemResponse(new NotFoundException('Cannot GET /nope'), BASE);
    expect(result.body).toEqual({
      type: `${BASE}not-found`,
      title: 'Resource not found',
      status: 404,
      detail: 'Cannot GET /nope',
      code: 'not_found',
    });
  });

  it('maps other HTTP errors to about:blank with the status phrase as title', () => {
    const result = toProblemResponse(new PayloadTooLargeException('request entity too large'), BASE);
    expect(result).toEqual({
      status: 413,
      unexpected: false,
      body: { type: 'about:blank', title: 'Payload Too Large', status: 413, detail: 'request entity too large' },
    });
    expect(toProblemResponse(new HttpException('I am a teapot', HttpStatus.I_AM_A_TEAPOT), BASE).body.title).toBe(
      "I'm a Teapot",
    );
  });

  it('joins list messages of Nest-built bodies', () => {
    const result = toProblemResponse(new BadRequestException(['a is bad', 'b is bad']), BASE);
    expect(result.body.detail).toBe('a is bad; b is bad');
  });

  it('keeps a deliberate 5xx HttpException public but does not call it unexpected', () => {
    const result = toProblemResponse(new ServiceUnavailableException('maintenance'), BASE);
    expect(result).toMatchObject({
      status: 503,
      unexpected: false,
      body: { type: 'about:blank', detail: 'maintenance' },
    });
  });

  it('turns any other error into an internal-error that says nothing of the cause', () => {
    const result = toProblemResponse(new Error('connect ECONNREFUSED 10.0.0.5:5432 password=hunter2'), BASE);
    expect(result).toEqual({
      status: 500,
      unexpected: true,
      body: {
        type: `${BASE}internal-error`,
        title: 'Internal server error',
        status: 500,
        detail: 'An unexpected error occurred. It has been logged.',
        code: 'internal_error',
      },
    });
    expect(JSON.stringify(result.body)).not.toContain('ECONNREFUSED');
    expect(toProblemResponse('a string was thrown', BASE).status).toBe(500);
  });
});

describe('isProblemDetails', () => {
  it('needs type, title and a numeric status', () => {
    expect(isProblemDetails({ type: 'x', title: 'y', status: 400 })).toBe(true);
    expect(isProblemDetails({ statusCode: 400, message: 'Bad Request' })).toBe(false);
    expect(isProblemDetails({ type: 'x', title: 'y', status: '400' })).toBe(false);
    expect(isProblemDetails(null)).toBe(false);
  });
});
