/** Units a wait may be written in, English or French, to ms. */
const UNITS: ReadonlyArray<[RegExp, number]> = [
  [/^(?:ms|millisecondes?|milliseconds?)$/, 1],
  [/^(?:s|sec|secs|secondes?|seconds?)$/, 1000],
  [/^(?:m|min|mins|minutes?)$/, 60_000],
  [/^(?:h|hrs?|heures?|hours?)$/, 3_600_000],
  [/^(?:d|jours?|days?)$/, 24 * 3_600_000],
];

/** Longest wait read from a message: a larger one (or a misread) must not silence the client for weeks. */
const MAX_WAIT_MS = 24 * 60 * 60_000;

/**
 * The wait a 429 answer's message gives, in ms (0 when it gives none): the service documents that over its
 * limit it answers HTTP 429 "with a message giving the wait", without saying how it is written. Reads the
 * first number followed by a unit, in English or French: "retry in 15 minutes", "réessayez dans 900
 * secondes", `{"message":"Too many requests. Try again in 1 h"}`; a bare number of seconds in a
 * `retry_after` style field of a JSON body too.
 */
export function waitFromMessage(text: string | undefined): number {
  if (typeof text !== 'string' || text.length === 0) return 0;
  const field = /"(?:retry_?after|wait|retryAfter)"\s*:\s*"?(\d+(?:\.\d+)?)"?/i.exec(text);
  if (field) return Math.min(Number(field[1]) * 1000, MAX_WAIT_MS);
  for (const match of text.matchAll(/(\d+(?:[.,]\d+)?)\s*([a-zA-Zé]+)/g)) {
    const unit = (match[2] as string).toLowerCase();
    const factor = UNITS.find(([pattern]) => pattern.test(unit))?.[1];
    if (factor !== undefined) {
      return Math.min(Number((match[1] as string).replace(',', '.')) * factor, MAX_WAIT_MS);
    }
  }
  return 0;
}
