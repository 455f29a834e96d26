import type { Expectation, ExpectationStore } from '../expectation-store.js';

/** Sends one raw command (the `RedisStore`'s own sender, whichever client it is). */
type Send = (args: string[]) => Promise<unknown>;

/** Stores one expectation: its hash and its place in the due set, together. */
const PUT = `redis.call('HSET', KEYS[1], 'data', ARGV[1], 'dueAt', ARGV[2], 'attempts', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4])
return 1`;

/** Takes the due ones: each moves to the next due time with one more attempt, in one atomic step. */
const TAKE_DUE = `local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local taken = {}
for _, id in ipairs(ids) do
  local key = ARGV[4] .. id
  local data = redis.call('HGET', key, 'data')
  if data then
    local attempts = redis.call('HINCRBY', key, 'attempts', 1)
    redis.call('HSET', key, 'dueAt', ARGV[2])
    redis.call('ZADD', KEYS[1], ARGV[2], id)
    table.insert(taken, data)
    table.insert(taken, tostring(attempts))
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return taken`;

const LOCK = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0`;

const UNLOCK = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

/** The fields kept as JSON: everything but the two that change at each sweep. */
type Data = Pick<Expectation, 'transactionId' | 'customData' | 'amount' | 'account' | 'expectedAt'>;

/**
 * Expectations in Redis, under the store's prefix: a hash per transaction (`expected:tx:<id>`), a sorted set
 * of due times (`expected:due`) and the sweep's lock (`expected:lock`). Every change is one script, so
 * instances sharing the Redis never take the same expectation twice for one due time.
 * @inline
 */
export class RedisExpectations implements ExpectationStore {
  readonly #send: Send;
  readonly #prefix: string;

  constructor(send: Send, prefix: string) {
    this.#send = send;
    this.#prefix = `${prefix}expected:`;
  }

  async put(expectation: Expectation): Promise<void> {
    const { dueAt, attempts, transactionId, customData, amount, account, expectedAt } = expectation;
    const data: Data = { transactionId, customData, amount, account, expectedAt };
    await this.#eval(
      PUT,
      [this.#key(transactionId), this.#due()],
      [JSON.stringify(data), String(dueAt), String(attempts), transactionId],
    );
  }

  async get(transactionId: string): Promise<Expectation | undefined> {
    const reply = await this.#send(['HMGET', this.#key(transactionId), 'data', 'dueAt', 'attempts']);
    const [data, dueAt, attempts] = (Array.isArray(reply) ? reply : []) as Array<string | null>;
    if (typeof data !== 'string') return undefined;
    return { ...(JSON.parse(data) as Data), dueAt: Number(dueAt), attempts: Number(attempts) };
  }

  async delete(transactionId: string): Promise<void> {
    await this.#send(['DEL', this.#key(transactionId)]);
    await this.#send(['ZREM', this.#due(), transactionId]);
  }

  async takeDue(now: number, nextDueAt: number, limit: number): Promise<Expectation[]> {
    const reply = await this.#eval(
      TAKE_DUE,
      [this.#due()],
      [String(now), String(nextDueAt), String(limit), `${this.#prefix}tx:`],
    );
    const flat = (Array.isArray(reply) ? reply : []) as string[];
    const taken: Expectation[] = [];
    for (let index = 0; index + 1 < flat.length; index += 2) {
      const data = JSON.parse(flat[index] as string) as Data;
      taken.push({ ...data, dueAt: nextDueAt, attempts: Number(flat[index + 1]) });
    }
    return taken;
  }

  async lockSweep(owner: string, ms: number): Promise<boolean> {
    return (await this.#eval(LOCK, [`${this.#prefix}lock`], [owner, String(Math.ceil(ms))])) === 1;
  }

  async unlockSweep(owner: string): Promise<void> {
    await this.#eval(UNLOCK, [`${this.#prefix}lock`], [owner]);
  }

  #key(transactionId: string): string {
    return `${this.#prefix}tx:${transactionId}`;
  }

  #due(): string {
    return `${this.#prefix}due`;
  }

  #eval(script: string, keys: string[], args: string[]): Promise<unknown> {
    return this.#send(['EVAL', script, String(keys.length), ...keys, ...args]);
  }
}
