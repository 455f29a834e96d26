import { auditPage } from '../audit-page.js';
import type { AuditEntry, AuditListOptions, AuditLog, PauseSwitch } from '../store.js';

/** Sends one raw command (the `RedisStore`'s own sender, whichever client it is). */
type Send = (args: string[]) => Promise<unknown>;

/**
 * Operator actions in Redis: one list under the store's prefix (`audit`), newest first, each action a JSON
 * text with its time (the app's clock). Shared by every instance; never trimmed (delete the key yourself).
 * @inline
 */
export class RedisAudit implements AuditLog {
  readonly #send: Send;
  readonly #key: string;

  constructor(send: Send, prefix: string) {
    this.#send = send;
    this.#key = `${prefix}audit`;
  }

  async record(entry: Omit<AuditEntry, 'at'>): Promise<void> {
    const kept = { action: entry.action, actor: entry.actor, detail: entry.detail, at: Date.now() };
    await this.#send(['LPUSH', this.#key, JSON.stringify(kept)]);
  }

  async list(options?: AuditListOptions): Promise<AuditEntry[]> {
    const { limit, offset } = auditPage(options);
    if (limit === 0) return [];
    const reply = (await this.#send([
      'LRANGE',
      this.#key,
      String(offset),
      String(offset + limit - 1),
    ])) as unknown[];
    return reply.map((text) => {
      const kept = JSON.parse(String(text)) as Omit<AuditEntry, 'at'> & { at: number };
      return { action: kept.action, actor: kept.actor, detail: kept.detail, at: new Date(kept.at) };
    });
  }
}

/**
 * Whether delivery is paused, in Redis: the key `paused` under the store's prefix (`'1'` while paused),
 * shared by every instance and kept across restarts.
 */
export function redisPauseSwitch(send: Send, prefix: string): PauseSwitch {
  const key = `${prefix}paused`;
  return {
    read: async () => (await send(['GET', key])) !== null,
    write: async (paused) => {
      await send(paused ? ['SET', key, '1'] : ['DEL', key]);
    },
  };
}
