import type { FinalState } from '../../notification/schema.js';
import { StoreError } from '../../shared/errors.js';
import {
  batchedDecide,
  type Decision,
  type LifecycleStore,
  type LifecycleVerdict,
  verdictOf,
} from '../lifecycle-store.js';
import { checkKey } from '../store-core.js';
import { sha1 } from './redis-inbox-scripts.js';

/** What the lifecycle needs of its `RedisStore`: its scripts, sent as its claims are. */
export interface RedisScripts {
  /** Runs `script` by its SHA, or whole when Redis has not seen it; `args`: the number of keys, the keys, ARGV. */
  script(script: string, sha: string, args: string[]): Promise<unknown>;
  /** Whether a script may have several keys now: never to an ioredis `Cluster`, nor after a CROSSSLOT. */
  severalKeys(): boolean;
  /** `several()`, or, when Redis refused a script of several keys (CROSSSLOT), `each()`, from then on. */
  severalOrEach<T>(several: () => Promise<T[]>, each: () => Promise<T[]>): Promise<T[]>;
  /** How long a batch stuck on the connection holds its place (the routers' shortest `storeTimeoutMs`). */
  stallMs(): number;
}

/**
 * Reads the state recorded at each key and records the new one (KEYS: the keys; ARGV: each one's state, then
 * its ttl in ms), a SUCCESSFUL never overwritten: answers what each held before, `''` for nothing, in order.
 * A key keeps the longer of its ttl left and the new one: a decision with a shorter `ttlMs` (another router
 * on the store) never cuts the time a state is kept. `%d`: a Lua number as a whole number (`tostring` would
 * write a large one with an exponent, which `PX` refuses). A key Redis refuses to read (WRONGTYPE: another
 * type of value) is left as it is and answers its error after a NUL, which no state starts with: that
 * decision alone fails (see {@link refusal}), not the others of its batch.
 */
const DECIDE = `local held = {}
for i, key in ipairs(KEYS) do
  local was = redis.pcall('GET', key)
  if type(was) == 'table' and was.err then
    held[i] = '\\0' .. was.err
  else
    local kept = ARGV[2 * i - 1]
    if was == 'SUCCESSFUL' then kept = was end
    local ttl = ARGV[2 * i]
    local left = redis.call('PTTL', key)
    if left > tonumber(ttl) then ttl = string.format('%d', left) end
    redis.call('SET', key, kept, 'PX', ttl)
    held[i] = was or ''
  end
end
return held`;
const DECIDE_SHA = sha1(DECIDE);

/** What the script answers for a key it refused: its error after a NUL, as a StoreError; else `held`. */
function refusal(held: unknown, transactionId: string): unknown {
  if (typeof held !== 'string' || !held.startsWith('\0')) return held;
  return new StoreError(
    `RedisStore: the lifecycle state of ${transactionId} cannot be read: ${held.slice(1)}`,
  );
}

/** A transaction id fails its own decision, not its batch's, when it is no string the key holds exactly. */
const checkId = (transactionId: string): unknown => checkKey('RedisStore', transactionId);

/**
 * Each transaction's accepted final state in Redis, under the store's prefix (`state:<id>`), kept at least
 * the router's `ttlMs` from its last decision, and never less than an earlier decision left it. The
 * decisions that arrive together go as one script ({@link batchedDecide}): atomic across instances. As
 * the claims: one script per decision to an ioredis `Cluster` (the keys live in different slots unless the
 * prefix has a hash tag), or after a proxy refused a script of several keys (CROSSSLOT).
 * @inline
 */
export class RedisLifecycle implements LifecycleStore {
  readonly #scripts: RedisScripts;
  readonly #prefix: string;
  readonly #batched: (decision: Decision) => Promise<LifecycleVerdict>;

  constructor(scripts: RedisScripts, prefix: string) {
    this.#scripts = scripts;
    this.#prefix = `${prefix}state:`;
    this.#batched = batchedDecide(
      (decisions) => {
        const each = () => Promise.all(decisions.map(async (decision) => (await this.#run([decision]))[0]));
        return decisions.length === 1
          ? this.#run(decisions)
          : scripts.severalOrEach(() => this.#run(decisions), each);
      },
      () => scripts.stallMs(),
      checkId,
    );
  }

  async decide(transactionId: string, state: FinalState, ttlMs: number): Promise<LifecycleVerdict> {
    const decision = { transactionId, state, ttlMs };
    if (this.#scripts.severalKeys()) return this.#batched(decision);
    checkId(transactionId);
    const [held] = await this.#run([decision]);
    if (held instanceof StoreError) throw held;
    return verdictOf(held, state);
  }

  /** One script for `decisions` (of distinct transactions): what each key held, in order (or its refusal). */
  async #run(decisions: Decision[]): Promise<unknown[]> {
    const args = [String(decisions.length)];
    for (const { transactionId } of decisions) args.push(this.#prefix + transactionId);
    for (const { state, ttlMs } of decisions) args.push(state, String(Math.max(1, Math.ceil(ttlMs))));
    const reply = await this.#scripts.script(DECIDE, DECIDE_SHA, args);
    if (!Array.isArray(reply) || reply.length !== decisions.length) {
      throw new StoreError(
        `RedisStore: unexpected reply to the lifecycle script: ${JSON.stringify(reply) ?? typeof reply}`,
      );
    }
    return reply.map((held, at) => refusal(held, decisions[at]!.transactionId));
  }
}
