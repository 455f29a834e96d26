import { z } from 'zod';
import type { FieldIssue } from '../shared/errors.js';
import { CustomDataError, messageOf } from '../shared/errors.js';
import { parseJson } from '../shared/safe-json.js';
import type { StandardIssue, StandardOutput, StandardSchemaV1 } from './standard-schema.js';

/** `customData` parsed by the partner's schema, or the reason it could not be. */
export type CustomDataResult<T> = { customData: T } | { customDataError: CustomDataError };

/**
 * Parses `custom_data` with the partner's schema: as JSON first (partners often put JSON text in it), then as
 * the raw string (an order id such as `"order-42"`). Never throws: a mismatch is returned, so the payment is
 * still emitted. The schema is any synchronous Standard Schema: zod 4 (`zod`, `zod/mini`) is read through
 * zod itself, any other (zod 3.24+, valibot, arktype, ...) through its `~standard.validate`.
 */
export function parseCustomData<S extends StandardSchemaV1>(
  schema: S,
  raw: string,
): CustomDataResult<StandardOutput<S>> {
  try {
    const check = checkerOf(schema);
    let firstFailure: Failure | undefined;
    const json = tryJson(raw);
    if (json.ok) {
      const parsed = check(json.value);
      if (parsed.ok) return { customData: parsed.value as StandardOutput<S> };
      firstFailure = parsed;
    }
    const parsed = check(raw);
    if (parsed.ok) return { customData: parsed.value as StandardOutput<S> };
    const failure = firstFailure ?? parsed;
    return { customDataError: new CustomDataError(failure.issues, failure.cause) };
  } catch (cause) {
    // A throwing refine or transform, or an asynchronous schema: the payment still goes out.
    return {
      customDataError: new CustomDataError(
        [{ path: '', message: `the customData schema threw: ${messageOf(cause)}` }],
        cause,
      ),
    };
  }
}

interface Failure {
  ok: false;
  issues: FieldIssue[];
  /** The zod error, or the Standard Schema issues as the schema reported them. */
  cause: unknown;
}

/** One value checked by the schema: its output, or the issues. Throws for a throwing or asynchronous schema. */
function checkerOf(schema: StandardSchemaV1): (value: unknown) => { ok: true; value: unknown } | Failure {
  // Every zod 4 schema, classic or mini, carries its internals in `_zod`: read it with zod, our own validator.
  if (typeof Reflect.get(schema, '_zod') === 'object') {
    const zodSchema = schema as unknown as z.core.$ZodType;
    return (value) => {
      const parsed = z.safeParse(zodSchema, value);
      return parsed.success
        ? { ok: true, value: parsed.data }
        : { ok: false, issues: toFieldIssues(parsed.error), cause: parsed.error };
    };
  }
  return (value) => {
    const result = schema['~standard'].validate(value);
    if (isThenable(result)) {
      result.then(undefined, () => undefined); // its outcome is not awaited: never an unhandled rejection
      throw new Error('it is asynchronous; custom_data is parsed synchronously: give a synchronous schema');
    }
    if (result.issues === undefined) return { ok: true, value: result.value };
    return { ok: false, issues: result.issues.map(toFieldIssue), cause: result.issues };
  };
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof value === 'object' && value !== null && typeof Reflect.get(value, 'then') === 'function';
}

/** A Standard Schema issue as `{ path, message }`. */
function toFieldIssue(issue: StandardIssue): FieldIssue {
  const path = (issue.path ?? []).map((segment) =>
    String(typeof segment === 'object' && segment !== null ? segment.key : segment),
  );
  return { path: path.join('.'), message: issue.message };
}

/** A zod error as `{ path, message }` pairs, the shape of every field problem ipn-kit reports. */
export function toFieldIssues(error: z.core.$ZodError): FieldIssue[] {
  return error.issues.map((issue) => ({ path: issue.path.map(String).join('.'), message: issue.message }));
}

function tryJson(raw: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: parseJson(raw) };
  } catch {
    return { ok: false };
  }
}
