/**
 * The Standard Schema interface, version 1 (https://standardschema.dev): what zod 3.24+ and 4, valibot,
 * arktype and others implement, so that a library can take any of them. Its authors publish it to be
 * copied rather than depended on; these are its types, as ipn-kit uses them.
 */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  /** The schema's Standard Schema properties. */
  readonly '~standard': StandardSchemaProps<Input, Output>;
}

/** The properties every Standard Schema carries under `~standard`. */
export interface StandardSchemaProps<Input = unknown, Output = Input> {
  /** The version of the interface: 1. */
  readonly version: 1;
  /** The library the schema comes from (`zod`, `valibot`, `arktype`, ...). */
  readonly vendor: string;
  /** Validates a value: its output, or the issues. An asynchronous schema returns a Promise. */
  readonly validate: (value: unknown) => StandardResult<Output> | Promise<StandardResult<Output>>;
  /** The schema's input and output types, for inference only (never present at run time). */
  readonly types?: StandardTypes<Input, Output> | undefined;
}

/** The result of `validate`: the output, or the issues. */
export type StandardResult<Output> = StandardSuccess<Output> | StandardFailure;

/** A value that matched. */
export interface StandardSuccess<Output> {
  /** The validated (and transformed) value. */
  readonly value: Output;
  /** Absent on success. */
  readonly issues?: undefined;
}

/** A value that did not match. */
export interface StandardFailure {
  /** What did not match. */
  readonly issues: readonly StandardIssue[];
}

/** One problem `validate` found. */
export interface StandardIssue {
  /** What is wrong, in the schema library's words. */
  readonly message: string;
  /** Where in the value: keys, or segments holding a key. */
  readonly path?: ReadonlyArray<PropertyKey | StandardPathSegment> | undefined;
}

/** One segment of an issue's path, when a library gives it as an object. */
export interface StandardPathSegment {
  /** The key of this segment. */
  readonly key: PropertyKey;
}

/** The input and output types of a Standard Schema. */
export interface StandardTypes<Input = unknown, Output = Input> {
  /** What the schema takes. */
  readonly input: Input;
  /** What the schema gives: the type of `customData`. */
  readonly output: Output;
}

/** The output type of a Standard Schema: what `customData` is for a given schema. */
export type StandardOutput<S extends StandardSchemaV1> = NonNullable<S['~standard']['types']>['output'];

/** Whether `value` is a Standard Schema (version 1, with a `validate` function). */
export function isStandardSchema(value: unknown): value is StandardSchemaV1 {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null) return false;
  const props: unknown = Reflect.get(value, '~standard');
  return (
    typeof props === 'object' &&
    props !== null &&
    Reflect.get(props, 'version') === 1 &&
    typeof Reflect.get(props, 'validate') === 'function'
  );
}
