/**
 * What a wrong argument was, in a few words, for the TypeError of an ORM adapter: "a plain object", "an
 * instance of Repository", "the function knex", "undefined".
 */
export function describeArgument(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (typeof value === 'function') return value.name === '' ? 'a function' : `the function ${value.name}`;
  if (typeof value !== 'object') return `a ${typeof value}`;
  const name = (value.constructor as { name?: unknown } | undefined)?.name;
  return typeof name === 'string' && name !== '' && name !== 'Object'
    ? `an instance of ${name}`
    : 'a plain object';
}
