import { StoreError } from '../shared/errors.js';

/** What a command writes to and reads from: the process's, or a test's. */
export interface CliIo {
  stdout: (line: string) => void;
  stderr: (line: string) => void;
  env: Record<string, string | undefined>;
  /**
   * `inbox replay --wait`'s times, in ms: how often it reads the progress (`pollMs`, 1 s) and how long
   * nothing may move before it gives up (`stallMs`, 5 minutes). Unset for the process: a test's, shorter.
   */
  replayWait?: { pollMs: number; stallMs: number };
}

/**
 * What an inbox command asks of the database itself, beside its store: the same connection, the database's
 * own clock and rules (each backend's dialect).
 */
export interface InboxDatabase {
  /**
   * The database's clock, in ms since the epoch: what stamped the deliveries (now(), UTC_TIMESTAMP(3),
   * TIME), so what a purge's dedupe window is measured by. This machine's clock, ahead of it, let a purge
   * through that deleted entries still inside the window by the database's.
   */
  clock(): Promise<number>;
  /**
   * The at-most-once claims made before `before` that still hold their key (`expires_at` later than the
   * database's now): what a purge of delivered entries would delete while a resend is still a duplicate.
   * The app's `ttlMs` set each one's `expires_at`, so this holds whatever `--ttl-ms` says. None where a
   * purge deletes no claims (Redis: its claims expire on their own).
   */
  liveClaims(before: Date): Promise<LiveClaims>;
}

/** How many claims still hold their key, and until when the last of them does (the epoch when none). */
export interface LiveClaims {
  count: number;
  until: Date;
}

/**
 * A count of live claims as the database answered it: `count`, and the last one's `expires_at` in ms since
 * the epoch (none: null). `where` names the inbox in the message of an answer that is no number.
 * @throws StoreError for an answer that is no count or time.
 */
export function liveClaimsOf(count: unknown, untilMs: unknown, where: string): LiveClaims {
  const claims = Number(count);
  const until = untilMs === null || untilMs === undefined ? 0 : Number(untilMs);
  if (!Number.isInteger(claims) || claims < 0 || !Number.isFinite(until))
    throw new StoreError(`${where}: the count of live claims answered no number`);
  return { count: claims, until: new Date(until) };
}
