import { guardLogger, type Logger } from '../observability/logger.js';
import { messageOf } from '../shared/errors.js';

/**
 * Old option names still accepted for one minor version, each mapped to the name that replaced it and
 * means the same thing (a duration renamed `...Ms` keeps its milliseconds).
 */
export type Renames<Old extends string, New extends string> = Readonly<Record<Old, New>>;

/** What {@link applyRenames} made of the options given. */
export interface Renamed<Old extends string, New extends string> {
  /** The options with every old name moved to its new one: only the new names are left. */
  options: Record<string, unknown>;
  /** The old names used, each with its new one, for the warning and for error messages naming the option. */
  used: ReadonlyArray<readonly [Old, New]>;
}

/** `where:old` of every deprecation already logged: once per process per option name, not per construction. */
const warned = new Set<string>();

/**
 * Moves each old name of `given` to its new name. Setting both to different values is a programmer error:
 * a `TypeError` naming both, since either one could be the value meant. The same value under both is
 * accepted (a codebase halfway through the rename).
 */
export function applyRenames<Old extends string, New extends string>(
  where: string,
  given: Readonly<Record<string, unknown>>,
  renames: Renames<Old, New>,
): Renamed<Old, New> {
  const options = { ...given };
  const used: Array<readonly [Old, New]> = [];
  for (const [old, current] of Object.entries(renames) as Array<[Old, New]>) {
    if (!(old in options)) continue;
    const value = options[old];
    delete options[old];
    if (current in options && !Object.is(options[current], value)) {
      throw new TypeError(
        `${where}: ${old} and ${current} are the same option (${old} is its deprecated name) and were given ` +
          `different values (${messageOf(value)} and ${messageOf(options[current])}): pass ${current} only`,
      );
    }
    options[current] = value;
    used.push([old, current]);
  }
  return { options, used };
}

/**
 * Logs, through the user's logger, one warning per old name used: once per process for each name, so a
 * router built per test or per tenant does not repeat it.
 */
export function warnRenamed(
  where: string,
  used: ReadonlyArray<readonly [string, string]>,
  logger: Logger,
): void {
  for (const [old, current] of used) {
    const key = `${where}:${old}`;
    if (warned.has(key)) continue;
    warned.add(key);
    guardLogger(logger).warn(
      { option: old, replacement: current },
      `${where}: the option ${old} is deprecated and will be removed in the next minor version: use ${current} (same value, in milliseconds)`,
    );
  }
}
