import { checkListOptions } from '../list-options.js';
import { checkLeaseLimit, checkReplayWith, leaseMs, replayEveryDead } from '../store-core.js';
import { randomUUID } from 'node:crypto';
import { INBOX_SCRIPTS, sha1, type InboxScript } from './redis-inbox-scripts.js';
import type {
  DeliveryStatus,
  DurableStore,
  InboxEntry,
  Lease,
  ListOptions,
  PauseSwitch,
  PurgedStatus,
  Settlement,
  StatusCounts,
} from '../store.js';
import { RedisExpectations } from './redis-expectations.js';
import { RedisLifecycle } from './redis-lifecycle.js';
import { RedisAudit, redisPauseSwitch } from './redis-audit.js';
import { checkPurge, redactEach } from '../redact-record.js';
import { persistenceWarning, saveOf } from './redis-persistence.js';
import { BatchStall, createBatcher } from '../batcher.js';
import { messageOf, StoreError } from '../../shared/errors.js';
import type { Logger } from '../../observability/logger.js';

/**
 * The part of an [ioredis](https://github.com/redis/ioredis) client (`new Redis()`, or a `Cluster`) that
 * {@link RedisStore} uses. Declared here so that ipn-kit's types never name the `ioredis` package.
 */
export interface IoRedisClient {
  /** Sends one command with its arguments and resolves with Redis's reply. */
  call(command: string, ...args: Array<string | number>): Promise<unknown>;
}

/**
 * The part of a [node-redis](https://github.com/redis/node-redis) client (v4 or v5, `createClient()`) that
 * {@link RedisStore} uses. Declared here so that ipn-kit's types never name the `redis` package.
 */
export interface NodeRedisClient {
  /** Sends one command (its name, then its arguments) and resolves with Redis's reply. */
  sendCommand(args: string[]): Promise<unknown>;
}

/**
 * Options of {@link RedisStore}.
 * @inline
 */
export interface RedisStoreOptions {
  /**
   * Your connected client: ioredis or node-redis. The store only sends commands through it; it never
   * connects, quits or configures it. Required.
   */
  client: IoRedisClient | NodeRedisClient;
  /**
   * Prepended to every dedupe key, so that the keys neither collide with your app's nor with another
   * router's on the same Redis.
   * @default 'ipn-kit:'
   */
  prefix: string;
}

/**
 * SET NX with this claim's token, or the token already there: atomic, as a script runs alone. Not while the
 * key's inbox entry (ARGV[3]: its name; '' when not looked at) exists: a receive (at least once, by an
 * instance in that mode) came first, and the claim is a duplicate, as in the SQL stores.
 */
const CLAIM_SCRIPT = `if ARGV[3] ~= '' and redis.call('EXISTS', ARGV[3]) == 1 then return 0 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0`;
/**
 * The claim script for many keys at once (KEYS: the keys; ARGV: each one's token, ttl and inbox entry), each
 * claimed as by {@link CLAIM_SCRIPT}: one reply of 1s and 0s, in order. A key Redis refuses (one holding a
 * hash: WRONGTYPE) gets Redis's error message as its reply, a failure of its claim alone, as if sent alone.
 */
const CLAIM_MANY_SCRIPT = `local claimed = {}
for i, key in ipairs(KEYS) do
  local token = ARGV[3 * i - 2]
  local entry = ARGV[3 * i]
  if entry ~= '' and redis.call('EXISTS', entry) == 1 then
    claimed[i] = 0
  else
    local set = redis.pcall('SET', key, token, 'NX', 'PX', ARGV[3 * i - 1])
    if type(set) == 'table' and set.err then
      claimed[i] = set.err
    elseif set then
      claimed[i] = 1
    else
      local held = redis.pcall('GET', key)
      if type(held) == 'table' and held.err then
        claimed[i] = held.err
      elseif held == token then
        claimed[i] = 1
      else
        claimed[i] = 0
      end
    end
  end
end
return claimed`;
const CLAIM_SHA = sha1(CLAIM_SCRIPT);
const CLAIM_MANY_SHA = sha1(CLAIM_MANY_SCRIPT);
const INBOX_SHAS = Object.fromEntries(
  Object.entries(INBOX_SCRIPTS).map(([name, script]) => [name, sha1(script)]),
) as Record<InboxScript, string>;

/** Sends one raw command, whichever client it is. */
export type Send = (args: string[]) => Promise<unknown>;

/** One claim as sent: the prefixed key, its token, its ttl in whole milliseconds, the key without prefix. */
type Claim = [key: string, token: string, ttl: string, unprefixed: string];

/**
 * Whether Redis refused a script for the slots of its keys: a proxy or a Cluster refusing several keys
 * (CROSSSLOT), or one refusing a key the script names without declaring it (see {@link refusedUndeclared}).
 */
function refusedSlots(error: unknown): boolean {
  return refusalOf(error).startsWith('CROSSSLOT') || refusedUndeclared(error);
}

/**
 * Whether Redis refused a script for a key it names but does not declare (the other key of a cross-check): a
 * Cluster node, for a key not in its declared keys' slot or node, or a Redis-compatible server that forbids
 * undeclared keys (Dragonfly, by default: "script tried accessing undeclared key").
 */
function refusedUndeclared(error: unknown): boolean {
  return /do not hash to the same slot|non local key|undeclared key/.test(refusalOf(error));
}

/** What Redis said of a refused script: the message of the client's error a `StoreError` wraps. */
function refusalOf(error: unknown): string {
  return messageOf(error instanceof StoreError ? error.cause : error);
}

/**
 * A dedupe store in Redis, shared by every instance of your app: a claim is one small script (`SET key token
 * NX PX ttl`, or the same token already there), which Redis runs atomically, so exactly one instance delivers
 * a notification. Claims made while one is on its way go together as one script of several keys, each
 * claimed as if alone (one command and one reply for the lot); to an ioredis `Cluster`, whose keys live in
 * different slots, each goes alone. Keys expire after the router's `ttlMs` by themselves. It needs the commands EVALSHA, EVAL
 * and DEL (a Redis whose ACL or hosting forbids scripts answers every claim with an error, so 503s).
 *
 * Give it your own client, ioredis or node-redis; ipn-kit loads neither package. You own the client: connect
 * it before the first notification (node-redis: `await client.connect()`), listen to its `error` event, and
 * quit it on shutdown; `ipn.close()` leaves it open.
 *
 * While Redis is unreachable, a claim fails or waits (ioredis and node-redis queue commands while they
 * reconnect); the router answers 503 after its `storeTimeoutMs`, and the service resends later.
 *
 * @example
 * import Redis from 'ioredis';
 * import { ipnRouter } from 'ipn-kit';
 * import { RedisStore } from 'ipn-kit/redis';
 *
 * const redis = new Redis(process.env.REDIS_URL);
 * app.use('/ipn', ipnRouter({ store: new RedisStore({ client: redis }) }));
 *
 * With `delivery: 'at-least-once'` it is also a durable inbox: each notification, its status, attempts and
 * lease live in Redis (under `prefix + '{inbox}:'`), every step one atomic script (receive, lease, settle,
 * replay, purge). Durable as far as your Redis persistence is: with `appendonly yes` and `appendfsync
 * everysec`, a power loss can drop about the last second of writes, notifications answered 200 included.
 *
 * @example
 * import { createClient } from 'redis';
 *
 * const redis = createClient({ url: process.env.REDIS_URL });
 * redis.on('error', (error) => logger.error(error));
 * await redis.connect();
 * app.use('/ipn', ipnRouter({ store: new RedisStore({ client: redis, prefix: 'shop:ipn:' }) }));
 */
export class RedisStore implements DurableStore {
  /** Accepted by `delivery: 'at-least-once'`: the inbox lives in Redis, as durable as its persistence. */
  readonly durable = true as const;
  /** The prefix of every key this store writes. */
  readonly prefix: string;
  /** Where `ipn.expect()` keeps expected transactions: under `prefix + 'expected:'`, shared by every instance. */
  readonly expectations: RedisExpectations;
  /** Each transaction's accepted final state: under `prefix + 'state:'`, kept at least the router's `ttlMs`. */
  readonly lifecycle: RedisLifecycle;
  /** Operator actions (replay, purge, pause): the list `prefix + 'audit'`, newest first. */
  readonly audit: RedisAudit;
  /** Whether delivery is paused (`ipn.pause()`): the key `prefix + 'paused'`, shared by every instance. */
  readonly pauseSwitch: PauseSwitch;
  readonly #send: Send;
  readonly #client: object;
  /** How long a batch of claims stuck on the connection holds its place: the routers' shortest storeTimeoutMs. */
  readonly #stall = new BatchStall();
  /**
   * Claims that arrive while one is on its way go together, as one script (one command, one reply), when
   * every key may be sent in one script: not to a Redis Cluster, whose keys live in different slots.
   */
  readonly #claims: ((claim: Claim) => Promise<unknown>) | undefined;
  /** A proxy in front of a sharded Redis refused a script of several keys (CROSSSLOT): one key each. */
  #oneKeyPerScript = false;
  /**
   * Whether a claim looks at the key's inbox entry, and a receive at the key's claim: the other's key lives
   * in another slot, so not on a Redis Cluster (an ioredis `Cluster`, or once Redis refused a script for
   * its slots). There a claim and a receive of one key, by instances in different delivery modes, do not
   * see each other.
   */
  #crossChecks = true;
  /**
   * What the client puts before the keys a script declares (ioredis's `keyPrefix` option), and so before the
   * other key a cross-check names, which it does not declare: '' for any other client.
   */
  readonly #keyPrefix: string;
  /** The loggers of the routers over this store ({@link useLogger}), told when `#crossChecks` turns off. */
  readonly #loggers = new Set<Logger>();

  constructor(options: Partial<RedisStoreOptions> & Pick<RedisStoreOptions, 'client'>) {
    const { client, prefix = 'ipn-kit:' } = (options ?? {}) as Partial<RedisStoreOptions>;
    this.#send = senderOf(client);
    this.#client = client as object;
    if (typeof prefix !== 'string') {
      throw new TypeError(`RedisStore: prefix must be a string, got ${typeof prefix}`);
    }
    this.prefix = prefix;
    this.expectations = new RedisExpectations((args) => this.#command(args), prefix);
    this.lifecycle = new RedisLifecycle(
      {
        script: (script, sha, args) => this.#script(script, sha, args),
        // The claims are batched exactly when the client is no Cluster.
        severalKeys: () => this.#claims !== undefined && !this.#oneKeyPerScript,
        severalOrEach: (several, each) => this.#severalOrEach(several, each),
        stallMs: this.#stall.ms,
      },
      prefix,
    );
    this.audit = new RedisAudit((args) => this.#command(args), prefix);
    this.pauseSwitch = redisPauseSwitch((args) => this.#command(args), prefix);
    const cluster = Reflect.get(client as object, 'isCluster') === true;
    this.#crossChecks = !cluster;
    const keyPrefix: unknown = Reflect.get(Object(Reflect.get(client as object, 'options')), 'keyPrefix');
    this.#keyPrefix = typeof keyPrefix === 'string' ? keyPrefix : '';
    this.#claims = cluster
      ? undefined
      : createBatcher((claims: Claim[]) => this.#claimMany(claims), { stallMs: this.#stall.ms });
  }

  /**
   * Claims `key` for `ttlMs` milliseconds: one script that runs `SET prefix+key token NX PX ttlMs`, and answers
   * true also when the key already holds this `token`. So a claim sent again after its answer was lost (a
   * connection reset after the write; ioredis resends unanswered commands by itself) is still this caller's.
   * Not while the key's inbox entry exists (a receive, at least once, came first), except on a Cluster.
   * @returns `true` when this call (or an earlier one with the same token) set the key, `false` when another
   * claim holds it, or the inbox has the key.
   */
  async claim(key: string, ttlMs: number, token: string = randomUUID()): Promise<boolean> {
    if (!Number.isFinite(ttlMs) || ttlMs <= 0) {
      throw new RangeError(`RedisStore: ttlMs must be a positive number of milliseconds, got ${ttlMs}`);
    }
    // PX takes a 64-bit integer, and String() writes 1e21 as "1e+21": Redis would refuse every claim.
    if (ttlMs > Number.MAX_SAFE_INTEGER) {
      throw new RangeError(
        `RedisStore: ttlMs must be at most ${Number.MAX_SAFE_INTEGER} milliseconds (about 285,000 years), got ${ttlMs}`,
      );
    }
    // PX takes whole milliseconds; rounding up never shortens the dedupe window.
    const claim: Claim = [this.prefix + key, token, String(Math.ceil(ttlMs)), key];
    const reply = await (this.#claims && !this.#oneKeyPerScript
      ? this.#claims(claim)
      : this.#claimOne(claim));
    if (reply === 1) return true;
    if (reply === 0) return false;
    // The router takes anything but a boolean as a store failure; say what Redis answered instead.
    throw new StoreError(
      `RedisStore: unexpected reply to the claim script: ${JSON.stringify(reply) ?? typeof reply} (is the ` +
        'client a Redis client, talking to Redis 6.2 or later?)',
    );
  }

  /** One claim, through {@link CLAIM_SCRIPT}: Redis's reply. */
  #claimOne([key, token, ttl, unprefixed]: Claim): Promise<unknown> {
    return this.#crossChecked(() =>
      this.#script(CLAIM_SCRIPT, CLAIM_SHA, ['1', key, token, ttl, this.#entryOf(unprefixed)]),
    );
  }

  /** The name of `key`'s inbox entry, for a claim to look at; '' when claims do not look (a Cluster). */
  #entryOf(key: string): string {
    return this.#crossChecks ? `${this.#keyPrefix}${this.#base()}e:${key}` : '';
  }

  /**
   * Runs `script` (a claim, a batch of claims or a receive, which names the other's key while `#crossChecks`
   * holds); once Redis refuses it for that undeclared key (a Cluster, or Dragonfly), runs it again without, as
   * every one from then on. A refused script ran nothing (a batch: nothing but claims it makes again, with
   * their tokens, which answer as the first time).
   */
  async #crossChecked<T>(script: () => Promise<T>): Promise<T> {
    const checked = this.#crossChecks;
    try {
      return await script();
    } catch (error) {
      if (!checked || !refusedUndeclared(error)) throw error;
      if (this.#crossChecks) {
        this.#crossChecks = false;
        const message =
          'RedisStore: this server refused a script naming a key it does not declare, so from now on a ' +
          'claim (at most once) and a receive (at least once) of one key do not look at each other. Only a ' +
          'deploy that switches `delivery` while both modes share this Redis is affected: a resend reaching ' +
          'an instance of the other mode is delivered again. Switch modes with every instance stopped, or ' +
          'keep one mode (see docs/stores-and-delivery.md, "Claims apart from the inbox")';
        for (const logger of this.#loggers)
          logger.warn({ crossChecks: false, error: messageOf(error) }, message);
      }
      return script();
    }
  }

  /**
   * The claims of one batch, as one script when there are several: one reply each, in order. A proxy that
   * refuses a script of several keys (CROSSSLOT: a sharded Redis behind one address) gets one script per key
   * from then on; the claims of the batch it refused are sent again so (a claim asked again with its token
   * answers as the first time).
   */
  async #claimMany(claims: Claim[]): Promise<unknown[]> {
    const each = () => Promise.all(claims.map((claim) => this.#claimOne(claim)));
    if (claims.length === 1) return each();
    // A refusal of the inbox entries the batch names turns the cross-checks off, not the batching.
    const several = async () => {
      const args: string[] = [String(claims.length)];
      for (const [key] of claims) args.push(key);
      for (const [, token, ttl, unprefixed] of claims) args.push(token, ttl, this.#entryOf(unprefixed));
      const reply = await this.#script(CLAIM_MANY_SCRIPT, CLAIM_MANY_SHA, args);
      // Anything but one reply per claim is the claims' failure: each says what Redis answered.
      return Array.isArray(reply) && reply.length === claims.length
        ? (reply as unknown[])
        : claims.map(() => reply);
    };
    return this.#severalOrEach(() => this.#crossChecked(several), each);
  }

  /**
   * `several()`, a script of several keys; once a proxy refused one (CROSSSLOT: a sharded Redis behind one
   * address), `each()`, one script per key, from then on. A refused script ran nothing: its keys are sent
   * again, each alone.
   */
  async #severalOrEach<T>(several: () => Promise<T[]>, each: () => Promise<T[]>): Promise<T[]> {
    if (this.#oneKeyPerScript) return each();
    try {
      return await several();
    } catch (error) {
      if (!refusedSlots(error)) throw error;
      this.#oneKeyPerScript = true;
      return each();
    }
  }

  /**
   * Deletes `prefix+key` and its inbox entry, so that the next claim or receive of `key` succeeds; given
   * `leaseId`, only the inbox entry, and only while that lease holds it.
   */
  async release(key: string, leaseId?: string): Promise<void> {
    // An entry no lease holds keeps an empty lease_id: an empty id must not pass for its holder.
    if (leaseId === '') return;
    if (leaseId !== undefined) {
      await this.#inbox('forget', [key, leaseId]);
      return;
    }
    // The claim last: while it holds the key, no receive stores an entry (an instance at least once), which
    // a forget after it would delete under that instance's lease. Deleted even when the forget failed.
    try {
      await this.#inbox('forget', [key, '']);
    } finally {
      await this.#command(['DEL', this.prefix + key]);
    }
  }

  /** Puts the service's `record` in place of the entry held by `leaseId`, atomically (see `DurableStore`). */
  async replace(
    key: string,
    leaseId: string,
    record: Record<string, unknown>,
    lease: Lease,
  ): Promise<boolean> {
    checkLease(lease);
    if (leaseId === '') return false; // no lease holds an entry as '' (see release)
    const args = [key, JSON.stringify(record), leaseId, lease.id, lease.ms, searchText(record)];
    return (await this.#inbox('replace', args)) === 1;
  }

  /**
   * At least once: stores `record` as received, leased to `lease`; `false` when `key` is there already, or
   * a live claim holds it (at most once, by an instance in that mode), except on a Cluster.
   */
  async receive(key: string, record: Record<string, unknown>, lease: Lease): Promise<boolean> {
    checkLease(lease);
    const args = [key, JSON.stringify(record), lease.id, lease.ms, searchText(record)];
    const claim = () => (this.#crossChecks ? this.#keyPrefix + this.prefix + key : '');
    const stored = await this.#crossChecked(() => this.#inbox('receive', [...args, claim()]));
    return stored === 1;
  }

  /** Leases up to `limit` entries that are due and not leased; two instances never get the same one. */
  async lease(lease: Lease, limit: number): Promise<InboxEntry[]> {
    checkLease(lease);
    checkLeaseLimit('RedisStore', limit);
    if (limit === 0) return [];
    return entries(await this.#inbox('lease', [lease.id, lease.ms, limit]));
  }

  /** Ends the attempt held by `leaseId`; `false` (changing nothing) when that lease was lost. */
  async settle(key: string, leaseId: string, settlement: Settlement): Promise<boolean> {
    const error = settlement.status === 'delivered' ? '' : String(settlement.error);
    const next = settlement.status === 'failed' ? settlement.nextAttemptAt.getTime() : 0;
    if (!Number.isFinite(next)) throw new TypeError('RedisStore.settle: nextAttemptAt must be a valid Date');
    if (leaseId === '') return false; // no lease holds an entry as '' (see release)
    return (await this.#inbox('settle', [key, leaseId, settlement.status, error, next])) === 1;
  }

  /** Entries matching every filter, oldest (or newest) received first. */
  async list(options: ListOptions = {}): Promise<InboxEntry[]> {
    const { status, transactionId, customDataContains, receivedFrom, receivedBefore, order, limit, offset } =
      checkListOptions('RedisStore', options);
    const reply = await this.#inbox('list', [
      status ?? '',
      transactionId ?? '',
      customDataContains?.toLowerCase() ?? '',
      receivedFrom ? receivedFrom.getTime() : '',
      receivedBefore ? receivedBefore.getTime() : '',
      order === 'newest' ? '1' : '0',
      offset,
      limit,
    ]);
    return entries(reply);
  }

  /** How many entries the inbox holds by status (received at or after `receivedFrom`, when given). */
  async countByStatus(receivedFrom?: Date): Promise<StatusCounts> {
    const reply = (await this.#inbox('count', [receivedFrom ? receivedFrom.getTime() : ''])) as number[];
    const [received = 0, delivered = 0, failed = 0, dead = 0] = reply.map(Number);
    return { received, delivered, failed, dead };
  }

  /** The entry of `key`, or `undefined`. */
  async get(key: string): Promise<InboxEntry | undefined> {
    const reply = await this.#command(['HGETALL', `${this.#base()}e:${key}`]);
    const [entry] = entries([reply]);
    return entry;
  }

  /** Makes `key` due now, attempts 0, whatever its status; a live lease is kept. */
  async replay(key: string, delayMs = 0, from?: readonly DeliveryStatus[]): Promise<boolean> {
    // No status allowed replays nothing (the script reads an empty list as "whatever its status").
    if (from !== undefined && from.length === 0) return false;
    return (await this.#inbox('replay', [key, String(Math.round(delayMs)), (from ?? []).join(',')])) === 1;
  }

  /** `replay(key, 0, from)` with the service's `record` in place, atomically (see `DurableStore.replayWith`). */
  async replayWith(
    key: string,
    record: Record<string, unknown>,
    from: readonly DeliveryStatus[],
  ): Promise<boolean> {
    const statuses = checkReplayWith('RedisStore', record, from);
    const args = [key, JSON.stringify(record), statuses, searchText(record)];
    return (await this.#inbox('replayWith', args)) === 1;
  }

  /** Replays every dead entry; resolves how many. */
  replayDead(): Promise<number> {
    return replayEveryDead(this);
  }

  /** Deletes entries delivered before `before` (given `'dead'`: dead ones last updated before it); how many. */
  async purge(before: Date, status: PurgedStatus = 'delivered'): Promise<number> {
    checkPurge('RedisStore', before, status);
    return Number(await this.#inbox(status === 'dead' ? 'purgeDead' : 'purge', [before.getTime()]));
  }

  /**
   * Blanks the customer's name and number in delivered and dead entries received before `before`; how many.
   * Each record is changed only if it is still the one read (a replace meanwhile keeps the new one).
   */
  async redact(before: Date): Promise<number> {
    checkPurge('RedisStore', before, 'delivered', 'redact');
    const flat = (await this.#inbox('redactable', [before.getTime()])) as string[];
    const candidates = [];
    for (let index = 0; index + 1 < flat.length; index += 2)
      candidates.push({ key: String(flat[index]), stored: String(flat[index + 1]) });
    return redactEach(
      candidates,
      (record) => JSON.stringify(record),
      async (key, stored, blanked) => Number(await this.#inbox('setRecord', [key, stored, blanked])) === 1,
    );
  }

  /** Where the inbox's keys start: one hash tag, so that a cluster keeps them in one slot. */
  #base(): string {
    return `${this.prefix}{inbox}:`;
  }

  /** Runs one inbox script by its SHA, or whole when Redis has not seen it yet. */
  async #inbox(name: InboxScript, args: Array<string | number>): Promise<unknown> {
    return this.#script(INBOX_SCRIPTS[name], INBOX_SHAS[name], ['1', this.#base(), ...args.map(String)]);
  }

  /**
   * Runs `script` by its SHA (EVALSHA sends 40 bytes instead of the script); a Redis that has not seen it yet
   * (a restart, a SCRIPT FLUSH) answers NOSCRIPT, and EVAL both runs and caches it. `args`: the number of
   * keys, the keys, then the arguments.
   */
  #script(script: string, sha: string, args: string[]): Promise<unknown> {
    return this.#command(['EVALSHA', sha, ...args]).catch((error: unknown) => {
      if (!isNoScript(error)) throw error;
      return this.#command(['EVAL', script, ...args]);
    });
  }

  /**
   * Why this Redis would not keep the inbox across a restart (no AOF and no RDB save point), or `undefined`
   * when it would, or when it cannot be told (`CONFIG GET save` refused, as hosted Redis may). The router
   * asks once, at its start with `delivery: 'at-least-once'`, and logs the answer as a warning.
   */
  async durabilityWarning(): Promise<string | undefined> {
    const info = await this.#command(['INFO', 'persistence']);
    if (typeof info !== 'string') return undefined;
    const save = await this.#command(['CONFIG', 'GET', 'save']).then(saveOf, () => undefined);
    return persistenceWarning(info, save);
  }

  /**
   * The router calls it with its logger: once Redis refuses the cross-check of a claim and a receive (a
   * Cluster node, Dragonfly), each logger is warned, once.
   */
  useLogger(logger: Logger): void {
    this.#loggers.add(logger);
  }

  /** Does nothing: the client is yours, and other parts of your app may still use it. Quit it yourself. */
  close(): void {}

  /**
   * The router's `storeTimeoutMs` (it calls this; several routers on one store: the shortest wins). A batch
   * of claims stuck that long on the connection gives up its place, so that the claims behind it are sent.
   */
  useStoreTimeout(storeTimeoutMs: number): void {
    this.#stall.use(storeTimeoutMs);
  }

  async #command(args: string[]): Promise<unknown> {
    // node-redis answers a command on a client that was never connected with "The client is closed", which
    // does not say what to do about it.
    if (Reflect.get(this.#client, 'isOpen') === false) {
      throw new StoreError(
        'RedisStore: the node-redis client is not connected: call `await client.connect()` before the first notification',
      );
    }
    try {
      return await this.#send(args);
    } catch (error) {
      // The client's own error stays the cause; a NOSCRIPT is answered by the caller (see isNoScript).
      throw new StoreError(`RedisStore: the ${args[0]} command failed: ${messageOf(error)}`, {
        cause: error,
      });
    }
  }
}

/** Finds how to send a raw command through `client`, or throws a `TypeError` naming what was expected. */
export function senderOf(client: unknown): Send {
  if (typeof client !== 'object' || client === null) {
    throw new TypeError(
      `RedisStore: client must be an ioredis or node-redis client instance, got ${client === null ? 'null' : typeof client}`,
    );
  }
  const call: unknown = Reflect.get(client, 'call');
  const sendCommand: unknown = Reflect.get(client, 'sendCommand');
  // ioredis first: its clients also have a `sendCommand`, which takes a Command object, not an array.
  if (typeof call === 'function') {
    return (args) => (call as (...args: string[]) => Promise<unknown>).apply(client, args);
  }
  if (typeof sendCommand === 'function') {
    // A node-redis cluster's sendCommand takes (firstKey, isReadonly, args): an array alone would fail there.
    if (typeof Reflect.get(client, 'getSlotMaster') === 'function') {
      throw new TypeError(
        'RedisStore: node-redis cluster clients (createCluster) are not supported; use an ioredis Cluster, ' +
          'or a node-redis client of one node (createClient)',
      );
    }
    return (args) => (sendCommand as (args: string[]) => Promise<unknown>).call(client, args);
  }
  throw new TypeError(
    'RedisStore: client must be an ioredis client (with a call() method) or a node-redis client from ' +
      'createClient() (with a sendCommand() method); this object has neither',
  );
}

const checkLease = (lease: Lease): number => leaseMs('RedisStore', lease);

/** HGETALL replies (flat arrays, or objects from a client that maps them) as inbox entries. */
function entries(reply: unknown): InboxEntry[] {
  if (!Array.isArray(reply)) return [];
  const found: InboxEntry[] = [];
  for (const item of reply as unknown[]) {
    const fields: Record<string, string> = {};
    if (Array.isArray(item)) {
      for (let index = 0; index + 1 < item.length; index += 2)
        fields[String(item[index])] = String(item[index + 1]);
    } else if (typeof item === 'object' && item !== null) Object.assign(fields, item);
    if (fields.key === undefined) continue;
    found.push(toEntry(fields));
  }
  return found;
}

function toEntry(fields: Record<string, string>): InboxEntry {
  const key = fields.key!;
  const at = key.lastIndexOf(':');
  const time = (value: string | undefined): Date | null =>
    value === undefined || value === '' ? null : new Date(Number(value));
  return {
    key,
    transactionId: key.slice(0, at),
    state: key.slice(at + 1),
    record: JSON.parse(fields.record ?? '{}') as Record<string, unknown>,
    status: fields.status as DeliveryStatus,
    attempts: Number(fields.attempts ?? 0),
    lastError: fields.last_error ? fields.last_error : null,
    receivedAt: time(fields.received_at)!,
    updatedAt: time(fields.updated_at)!,
    nextAttemptAt: time(fields.next_attempt_at)!,
    deliveredAt: time(fields.delivered_at),
    leaseUntil: time(fields.lease_until),
  };
}

/**
 * What `list({ customDataContains })` searches: `custom_data` in lower case, kept beside the record. Redis's
 * JSON decoder refuses a lone surrogate, which the record (JSON text) keeps exactly, so the search cannot
 * decode the record in the script. Lower-cased here, as the needle is, so non-ASCII letters match too.
 */
function searchText(record: Record<string, unknown>): string {
  const data = record.custom_data;
  return typeof data === 'string' ? data.toLowerCase() : '';
}

/** Whether Redis answered NOSCRIPT (it has not seen the script yet): then EVAL runs and caches it. */
function isNoScript(error: unknown): boolean {
  const raw = error instanceof StoreError ? error.cause : error;
  return messageOf(raw).startsWith('NOSCRIPT');
}
