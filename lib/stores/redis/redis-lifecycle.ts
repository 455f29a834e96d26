import type { FinalState } from '../../notification/schema.js';
import { verdictOf, type LifecycleStore, type LifecycleVerdict } from '../lifecycle-store.js';

/** Sends one raw command (the `RedisStore`'s own sender, whichever client it is). */
type Send = (args: string[]) => Promise<unknown>;

/**
 * Reads the state recorded and records the new one in one step (a SUCCESSFUL is never overwritten), for
 * `ttlMs`: answers what was recorded before, `''` for nothing.
 */
const DECIDE = `local held = redis.call('GET', KEYS[1])
local kept = ARGV[1]
if held == 'SUCCESSFUL' then kept = held end
redis.call('SET', KEYS[1], kept, 'PX', ARGV[2])
return held or ''`;

/**
 * Each transaction's accepted final state in Redis, under the store's prefix (`state:<id>`), kept the
 * router's `ttlMs` from its last decision. One script per decision: atomic across instances.
 * @inline
 */
export class RedisLifecycle implements LifecycleStore {
  readonly #send: Send;
  readonly #prefix: string;

  constructor(send: Send, prefix: string) {
    this.#send = send;
    this.#prefix = `${prefix}state:`;
  }

  async decide(transactionId: string, state: FinalState, ttlMs: number): Promise<LifecycleVerdict> {
    const ms = String(Math.max(1, Math.ceil(ttlMs)));
    const held = await this.#send(['EVAL', DECIDE, '1', this.#prefix + transactionId, state, ms]);
    return verdictOf(held, state);
  }
}
