/**
 * What an `authenticate` function receives: the request's parts, before the notification is validated.
 * @inline
 */
export interface AuthenticateInput {
  /**
   * The body's bytes as they arrived (after decompression), when the router read the stream itself;
   * `undefined` behind a host parser that decoded it (a global `express.json()`), where only `body` is left.
   */
  rawBody: Buffer | undefined;
  /**
   * The body as a JSON parser decodes it (`JSON.parse` of `rawBody`, or the host parser's `req.body`): what
   * `JSON.stringify(req.body)` in the service's own example is computed over. `undefined` when it is not JSON.
   */
  body: unknown;
  /**
   * The `token` query parameter of the IPN address, if any: for a token per transaction (an `ipn_url` built
   * for each payment), which `authenticate` checks against the record (its `custom_data`, say).
   */
  token: string | undefined;
  /** The request's headers, names in lower case. */
  headers: Readonly<Record<string, string | readonly string[] | undefined>>;
  /** The body read as a record (not yet validated): `record.hash` is the notification's own `hash` field. */
  record: Readonly<Record<string, unknown>>;
}

/**
 * Proves that a notification comes from the service: `true` to accept it, `false` to answer 401 (an
 * `invalid` event with reason `unauthorized`). A function that throws (or rejects) is a bug: the request is
 * answered 500, so the service resends, and the failure is an `error` event.
 */
export type Authenticate = (input: AuthenticateInput) => boolean | Promise<boolean>;
