/**
 * What a Redis without persistence costs an at-least-once inbox, from `INFO persistence` and, when the server
 * allows it, `CONFIG GET save` (hosted Redis often refuses CONFIG: then only an `aof_enabled:0` with no
 * RDB save point known is not enough to tell, and nothing is said). `undefined` when Redis persists, or when
 * that cannot be told.
 *
 * @param info the text `INFO persistence` answered
 * @param save the value of `CONFIG GET save` (`''`: no RDB snapshot ever), `undefined` when refused
 */
export function persistenceWarning(info: string, save: string | undefined): string | undefined {
  const aof = /^aof_enabled:(\d+)/m.exec(info)?.[1];
  if (aof === undefined || aof !== '0') return undefined; // AOF on, or an answer this is not
  if (save === undefined || save.trim() !== '') return undefined; // RDB snapshots, or not known
  return (
    'RedisStore with delivery: \'at-least-once\' on a Redis without persistence (appendonly no, save ""): ' +
    'a Redis restart loses the whole inbox, notifications already answered 200 but not yet delivered ' +
    'included, and the service never resends those. Turn on AOF (appendonly yes, appendfsync everysec) or ' +
    'RDB snapshots, or use PostgresStore'
  );
}

/** The value of a `CONFIG GET save` reply (`['save', '3600 1']`, or a map in RESP3), if it has one. */
export function saveOf(reply: unknown): string | undefined {
  if (Array.isArray(reply) && reply[0] === 'save' && typeof reply[1] === 'string') return reply[1];
  if (reply instanceof Map) {
    const value: unknown = reply.get('save');
    return typeof value === 'string' ? value : undefined;
  }
  if (typeof reply === 'object' && reply !== null) {
    const value = (reply as Record<string, unknown>).save;
    return typeof value === 'string' ? value : undefined;
  }
  return undefined;
}
