import { CUSTOMER_FIELDS } from '../observability/redact.js';

const MASK = '[redacted]';

/** A masker for the page: the customer's number and name hidden, unless `reveal`. */
export function createMasker(reveal: boolean) {
  /** The record with `destination` and `customer_name` replaced. */
  const record = (value: Record<string, unknown>): Record<string, unknown> => {
    if (reveal) return value;
    const copy = { ...value };
    for (const field of CUSTOMER_FIELDS)
      if (copy[field] !== undefined && copy[field] !== null) copy[field] = MASK;
    return copy;
  };
  /** `text` with the customer's number and name (as `of` holds them) replaced wherever they appear. */
  const text = (value: string, of: Record<string, unknown> | undefined): string => {
    if (reveal || of === undefined) return value;
    return CUSTOMER_FIELDS.map((field) => of[field])
      .filter((found): found is string | number => typeof found === 'string' || typeof found === 'number')
      .map(String)
      .filter((found) => found.trim().length >= 3)
      .reduce((result, found) => result.split(found).join(MASK), value);
  };
  return { record, text };
}
