import { z } from 'zod';
import type { FieldIssue } from './errors.js';
import { CustomDataError, messageOf } from './errors.js';
import { parseJson } from './safe-json.js';

/** `customData` parsed by the partner's schema, or the reason it could not be. */
export type CustomDataResult<T> = { customData: T } | { customDataError: CustomDataError };

/**
 * Parses `custom_data` with the partner's schema: as JSON first (partners often put JSON text in it), then as
 * the raw string (an order id such as `"order-42"`). Never throws: a mismatch is returned, so the payment is
 * still emitted.
 */
export function parseCustomData<S extends z.core.$ZodType>(
  schema: S,
  raw: string,
): CustomDataResult<z.core.output<S>> {
  try {
    let firstError: z.core.$ZodError | undefined;
    const json = tryJson(raw);
    if (json.ok) {
      const parsed = z.safeParse(schema, json.value);
      if (parsed.success) return { customData: parsed.data };
      firstError = parsed.error;
    }
    const parsed = z.safeParse(schema, raw);
    if (parsed.success) return { customData: parsed.data };
    const error = firstError ?? parsed.error;
    return { customDataError: new CustomDataError(toFieldIssues(error), error) };
  } catch (cause) {
    // safeParse lets a throwing refine or transform through (and refuses async ones): the payment still goes out.
    return {
      customDataError: new CustomDataError(
        [{ path: '', message: `the customData schema threw: ${messageOf(cause)}` }],
        cause,
      ),
    };
  }
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
