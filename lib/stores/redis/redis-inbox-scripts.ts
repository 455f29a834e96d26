import { createHash } from 'node:crypto';

/**
 * The Lua scripts of `RedisStore`'s inbox (at least once). Each runs atomically in Redis. KEYS[1] is the
 * base of every key (`prefix + '{inbox}:'`: one hash tag, so a Redis Cluster keeps them in one slot):
 *
 * - `e:<key>`: a hash per notification (`key`, `record` as JSON, `search`: its `custom_data` in lower case,
 *   `status`, `attempts`, `last_error`, and the times `received_at`, `updated_at`, `next_attempt_at`,
 *   `delivered_at`, `lease_until` in ms; `lease_id`); an empty string stands for null.
 * - `due`: `received` and `failed` keys, scored by when they may be leased (the later of their next attempt
 *   and their lease's end); `all`: every key by `received_at`; `done`: delivered keys by `delivered_at`;
 *   `dead`: the set of dead keys.
 *
 * Times come from Redis's own clock (TIME), so instances whose clocks disagree still agree on leases.
 */

/** A script's SHA1, as EVALSHA names it. */
export const sha1 = (script: string): string => createHash('sha1').update(script).digest('hex');

/** The header of the scripts that write: Redis's time in ms, with effects replication on Redis < 5. */
const NOW = `if redis.replicate_commands then pcall(redis.replicate_commands) end
local base = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

const REPLAY_ONE = `local function replay(k, delay, from)
  local e = base .. 'e:' .. k
  if redis.call('EXISTS', e) == 0 then return 0 end
  if from and from ~= '' and not string.find(',' .. from .. ',', ',' .. redis.call('HGET', e, 'status') .. ',', 1, true) then
    return 0
  end
  local due = now + (delay or 0)
  redis.call('HMSET', e, 'status', 'received', 'attempts', 0, 'next_attempt_at', due, 'updated_at', now)
  local held = tonumber(redis.call('HGET', e, 'lease_until'))
  local score = due
  if held and held > now then score = held end
  redis.call('ZADD', base .. 'due', score, k)
  redis.call('ZREM', base .. 'done', k)
  redis.call('SREM', base .. 'dead', k)
  return 1
end`;

export const INBOX_SCRIPTS = {
  /**
   * ARGV: key, record JSON, lease id, lease ms, custom_data in lower case (what `list` searches), the key's
   * claim ('' when not looked at). 1 when stored, 0 when the key is there already, or a live claim holds it
   * (at most once, by an instance in that mode: the receive is a duplicate, as in the SQL stores).
   */
  receive: `${NOW}
local k = ARGV[1]
local e = base .. 'e:' .. k
if ARGV[6] ~= '' and redis.call('EXISTS', ARGV[6]) == 1 then return 0 end
if redis.call('EXISTS', e) == 1 then return 0 end
local held = now + tonumber(ARGV[4])
redis.call('HMSET', e, 'key', k, 'record', ARGV[2], 'status', 'received', 'attempts', 1, 'last_error', '',
  'received_at', now, 'updated_at', now, 'next_attempt_at', now, 'delivered_at', '', 'lease_id', ARGV[3],
  'lease_until', held, 'search', ARGV[5])
redis.call('ZADD', base .. 'due', held, k)
redis.call('ZADD', base .. 'all', now, k)
return 1`,

  /** ARGV: lease id, lease ms, limit. The entries taken, each as HGETALL's flat array. */
  lease: `${NOW}
local taken = {}
local keys = redis.call('ZRANGEBYSCORE', base .. 'due', '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
for _, k in ipairs(keys) do
  local e = base .. 'e:' .. k
  if redis.call('EXISTS', e) == 0 then
    redis.call('ZREM', base .. 'due', k)
  else
    local held = now + tonumber(ARGV[2])
    redis.call('HMSET', e, 'lease_id', ARGV[1], 'lease_until', held, 'updated_at', now)
    redis.call('HINCRBY', e, 'attempts', 1)
    redis.call('ZADD', base .. 'due', held, k)
    taken[#taken + 1] = redis.call('HGETALL', e)
  end
end
return taken`,

  /** ARGV: key, lease id, status, error, next attempt (ms). 1 when settled, 0 when the lease was lost. */
  settle: `${NOW}
local k = ARGV[1]
local e = base .. 'e:' .. k
if redis.call('HGET', e, 'lease_id') ~= ARGV[2] then return 0 end
redis.call('HMSET', e, 'status', ARGV[3], 'updated_at', now, 'lease_id', '', 'lease_until', '')
if ARGV[3] == 'delivered' then
  redis.call('HSET', e, 'delivered_at', now)
  redis.call('ZREM', base .. 'due', k)
  redis.call('ZADD', base .. 'done', now, k)
elseif ARGV[3] == 'failed' then
  redis.call('HMSET', e, 'last_error', ARGV[4], 'next_attempt_at', ARGV[5])
  redis.call('ZADD', base .. 'due', tonumber(ARGV[5]), k)
else
  redis.call('HSET', e, 'last_error', ARGV[4])
  redis.call('ZREM', base .. 'due', k)
  redis.call('SADD', base .. 'dead', k)
end
return 1`,

  /**
   * ARGV: key, delay in ms, the statuses it may be in (comma-separated; empty: any). 1 when replayed, 0 when
   * there is no entry or it is in another status.
   */
  replay: `${NOW}
${REPLAY_ONE}
return replay(ARGV[1], tonumber(ARGV[2]) or 0, ARGV[3])`,

  /**
   * ARGV: key, record JSON, the statuses it may be in (comma-separated), custom_data in lower case. The
   * service's record in place of the entry's, made due now, attempts 0, in one step: only while its status is
   * one of those and no live lease holds it. 1 when done, 0 when there is no entry, or it is in another
   * status, or leased.
   */
  replayWith: `${NOW}
local k = ARGV[1]
local e = base .. 'e:' .. k
if redis.call('EXISTS', e) == 0 then return 0 end
if not string.find(',' .. ARGV[3] .. ',', ',' .. redis.call('HGET', e, 'status') .. ',', 1, true) then
  return 0
end
local held = tonumber(redis.call('HGET', e, 'lease_until'))
if held and held > now then return 0 end
redis.call('HMSET', e, 'record', ARGV[2], 'search', ARGV[4], 'status', 'received', 'attempts', 0,
  'next_attempt_at', now, 'updated_at', now)
redis.call('ZADD', base .. 'due', now, k)
redis.call('ZREM', base .. 'done', k)
redis.call('SREM', base .. 'dead', k)
return 1`,

  /** ARGV: before (ms). Deletes entries delivered before it; how many. */
  purge: `local base = KEYS[1]
local keys = redis.call('ZRANGEBYSCORE', base .. 'done', '-inf', '(' .. ARGV[1])
for _, k in ipairs(keys) do
  redis.call('DEL', base .. 'e:' .. k)
  redis.call('ZREM', base .. 'all', k)
  redis.call('ZREM', base .. 'done', k)
end
return #keys`,

  /** ARGV: before (ms). Deletes dead entries last updated before it; how many. */
  purgeDead: `local base = KEYS[1]
local count = 0
for _, k in ipairs(redis.call('SMEMBERS', base .. 'dead')) do
  local e = base .. 'e:' .. k
  local at = tonumber(redis.call('HGET', e, 'updated_at'))
  if at and at < tonumber(ARGV[1]) and redis.call('HGET', e, 'status') == 'dead' then
    redis.call('DEL', e)
    redis.call('ZREM', base .. 'all', k)
    redis.call('ZREM', base .. 'due', k)
    redis.call('SREM', base .. 'dead', k)
    count = count + 1
  end
end
return count`,

  /**
   * ARGV: before (ms). The keys and records of delivered and dead entries received before it, as a flat
   * array: what \`redact\` blanks in JavaScript (one rule for every store that changes records there).
   */
  redactable: `local base = KEYS[1]
local out = {}
for _, k in ipairs(redis.call('ZRANGEBYSCORE', base .. 'all', '-inf', '(' .. ARGV[1])) do
  local status = redis.call('HGET', base .. 'e:' .. k, 'status')
  if status == 'delivered' or status == 'dead' then
    out[#out + 1] = k
    out[#out + 1] = redis.call('HGET', base .. 'e:' .. k, 'record')
  end
end
return out`,

  /**
   * ARGV: key, record as read, blanked record. 1 when set; 0 when the record changed meanwhile, or the entry
   * is no longer delivered or dead (a replay since it was read: what is still to deliver keeps its record).
   */
  setRecord: `local e = KEYS[1] .. 'e:' .. ARGV[1]
if redis.call('HGET', e, 'record') ~= ARGV[2] then return 0 end
local status = redis.call('HGET', e, 'status')
if status ~= 'delivered' and status ~= 'dead' then return 0 end
redis.call('HSET', e, 'record', ARGV[3])
return 1`,

  /**
   * ARGV: key, record JSON, lease id held, new lease id, lease ms, custom_data in lower case. Puts the record
   * in place of the entry held by that lease, in one step (never through absent). 1 when replaced, 0 when the
   * lease no longer holds it.
   */
  replace: `${NOW}
local k = ARGV[1]
local e = base .. 'e:' .. k
if redis.call('HGET', e, 'lease_id') ~= ARGV[3] then return 0 end
local held = now + tonumber(ARGV[5])
redis.call('HMSET', e, 'record', ARGV[2], 'status', 'received', 'attempts', 1, 'last_error', '',
  'next_attempt_at', now, 'updated_at', now, 'lease_id', ARGV[4], 'lease_until', held, 'search', ARGV[6])
redis.call('ZADD', base .. 'due', held, k)
redis.call('ZREM', base .. 'done', k)
redis.call('SREM', base .. 'dead', k)
return 1`,

  /** ARGV: key, lease id or ''. Forgets the entry whatever its status (a release); given a lease, only its. */
  forget: `local base = KEYS[1]
local k = ARGV[1]
if ARGV[2] ~= '' and redis.call('HGET', base .. 'e:' .. k, 'lease_id') ~= ARGV[2] then return 0 end
redis.call('DEL', base .. 'e:' .. k)
redis.call('ZREM', base .. 'due', k)
redis.call('ZREM', base .. 'all', k)
redis.call('ZREM', base .. 'done', k)
redis.call('SREM', base .. 'dead', k)
return 1`,

  /**
   * ARGV: status, transaction id, text in custom_data (lower case), received from, received before (ms, or
   * '' for none), newest ('1'), offset, limit. The matching entries, each as HGETALL's flat array.
   */
  list: `local base = KEYS[1]
local from = ARGV[4] ~= '' and ARGV[4] or '-inf'
local before = ARGV[5] ~= '' and ('(' .. ARGV[5]) or '+inf'
local keys
if ARGV[6] == '1' then
  keys = redis.call('ZREVRANGEBYSCORE', base .. 'all', before, from)
else
  keys = redis.call('ZRANGEBYSCORE', base .. 'all', from, before)
end
local skip, limit, out = tonumber(ARGV[7]), tonumber(ARGV[8]), {}
for _, k in ipairs(keys) do
  if #out >= limit then break end
  local e = base .. 'e:' .. k
  local status = redis.call('HGET', e, 'status')
  local ok = status and (ARGV[1] == '' or status == ARGV[1])
  if ok and ARGV[2] ~= '' then
    local at = string.find(k, ':[^:]*$')
    ok = at ~= nil and string.sub(k, 1, at - 1) == ARGV[2]
  end
  if ok and ARGV[3] ~= '' then
    local data = redis.call('HGET', e, 'search')
    ok = type(data) == 'string' and string.find(data, ARGV[3], 1, true) ~= nil
  end
  if ok then
    if skip > 0 then skip = skip - 1 else out[#out + 1] = redis.call('HGETALL', e) end
  end
end
return out`,

  /** ARGV: received from (ms, or ''). Counts of received, delivered, failed, dead. */
  count: `local base = KEYS[1]
local from = ARGV[1] ~= '' and ARGV[1] or '-inf'
local counts = { received = 0, delivered = 0, failed = 0, dead = 0 }
for _, k in ipairs(redis.call('ZRANGEBYSCORE', base .. 'all', from, '+inf')) do
  local status = redis.call('HGET', base .. 'e:' .. k, 'status')
  if status and counts[status] then counts[status] = counts[status] + 1 end
end
return { counts.received, counts.delivered, counts.failed, counts.dead }`,
};

/** The name of one of {@link INBOX_SCRIPTS}. */
export type InboxScript = keyof typeof INBOX_SCRIPTS;
