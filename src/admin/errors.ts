import { SkiplockError, ValidationError } from '../errors.js';

/** The one JSON error envelope of the admin API. */
export interface ErrorBody {
  error: { code: string; message: string; field?: string };
}

export function errorBody(code: string, message: string, field?: string): ErrorBody {
  return { error: { code, message, ...(field === undefined ? {} : { field }) } };
}

/** Maps an error to its HTTP status and envelope. */
export function toHttpError(error: unknown): { status: 400 | 404 | 409 | 500 | 503; body: ErrorBody } {
  if (error instanceof ValidationError)
    return { status: 400, body: errorBody(error.code, error.message, error.field) };
  if (error instanceof SkiplockError) {
    switch (error.code) {
      case 'ERR_NOT_FOUND':
        return { status: 404, body: errorBody(error.code, error.message) };
      case 'ERR_CONFLICT':
      case 'ERR_DEDUPE_CONFLICT':
        return { status: 409, body: errorBody(error.code, error.message) };
      case 'ERR_DATABASE':
      case 'ERR_NOT_MIGRATED':
        return { status: 503, body: errorBody(error.code, error.message) };
      default:
        return { status: 500, body: errorBody(error.code, error.message) };
    }
  }
  return { status: 500, body: errorBody('ERR_INTERNAL', 'Internal error') };
}
