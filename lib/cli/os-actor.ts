import { userInfo } from 'node:os';
import { UNKNOWN_ACTOR } from '../delivery/audit.js';

/** Who runs this process: the CLI's actor in the audit trail when `--actor` is not given. */
export function osActor(): string {
  try {
    return userInfo().username || UNKNOWN_ACTOR;
  } catch {
    return UNKNOWN_ACTOR; // no user entry for this uid (a container's)
  }
}
