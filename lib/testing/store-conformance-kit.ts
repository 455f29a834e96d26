import { randomUUID } from 'node:crypto';
import type { DurableStore, InboxEntry, Lease } from '../stores/store.js';

/** One rule a store broke: its name (such as `'claim-atomic'`) and what was seen, in words. */
export interface ConformanceFailure {
  /** The rule's name, as listed in {@link StoreConformanceResult.passed} and `skipped`. */
  rule: string;
  /** What the store did, against what the rule expects. */
  message: string;
}

/** What {@link runStoreConformance} resolves: `failures` is empty when the store conforms. */
export interface StoreConformanceResult {
  /** The rules the store broke, in the order they ran. Empty when it conforms. */
  failures: ConformanceFailure[];
  /** The rules that ran and held. */
  passed: string[];
  /** The rules that did not run, and why (not durable, an optional method absent, or `skip`). */
  skipped: Array<{ rule: string; reason: string }>;
}

/** Ends a rule: thrown by `must`, recorded by the runner as a failure with this message. */
export class RuleFailure extends Error {}

/** Records a broken rule when `condition` does not hold (the runner catches it; nothing escapes). */
export function must(condition: unknown, message: string): asserts condition {
  if (!condition) throw new RuleFailure(message);
}

/** `actual` must equal `expected` as JSON (key order aside): `what` names it in the message. */
export function same(actual: unknown, expected: unknown, what: string): void {
  must(
    canonical(actual) === canonical(expected),
    `${what}: expected ${canonical(expected)}, got ${canonical(actual)}`,
  );
}

/** JSON with object keys sorted (a JSON column may give them back in another order), Dates as ISO. */
export function canonical(value: unknown): string {
  if (value === undefined) return 'undefined';
  return JSON.stringify(value, (_key, item: unknown) => {
    if (item === null || typeof item !== 'object' || Array.isArray(item)) return item;
    const sorted: Record<string, unknown> = {};
    for (const key of Object.keys(item).sort()) sorted[key] = (item as Record<string, unknown>)[key];
    return sorted;
  });
}

/**
 * A store as the rules call it: typed as a durable one, since the runner runs the inbox's rules only on a
 * durable store (and a store missing a method fails the rule that calls it, with the TypeError as message).
 */
export type AnyStore = DurableStore;

/** Which stores a rule applies to: every store, durable ones, or those with the optional part it checks. */
export type Needs =
  | 'store'
  | 'durable'
  | 'countByStatus'
  | 'expectations'
  | 'lifecycle'
  | 'redact'
  | 'audit'
  | 'pauseSwitch'
  | 'lateWrite'
  | 'replayWith';

/**
 * How the `late-write` rule writes as a listener would, through what a delivery attempt hands its listeners
 * (its `tx`, and its `db` when the store gives another one), and reads, on its own, whether that write
 * landed. The kit cannot write through your ORM or driver by itself: give it one insert and one read.
 */
export interface LateWriteProbe {
  /**
   * Writes one row identified by `id` through `through` (the attempt's `tx` or `db`, as your listeners get
   * them), as a listener credits an order; resolves once the write is done, rejects when it is refused.
   */
  write(through: unknown, id: string): Promise<unknown>;
  /** Whether the row of `id` exists, read outside any delivery transaction (another connection). */
  landed(id: string): Promise<boolean>;
}

/** One rule of the suite. */
export interface Rule {
  name: string;
  needs: Needs;
  run(kit: RuleKit): Promise<void>;
}

/** What every rule gets: a fresh store, and helpers that keep the rules short. */
export interface RuleKit {
  store: AnyStore;
  /**
   * The instance the `index`th concurrent call goes to: `store`, or, given `openPeer`, `store` and a second
   * instance over the same data by turns (as two processes of an app would call).
   */
  at(index: number): AnyStore;
  /** Whether the inbox's rules run on this store. */
  durable: boolean;
  /** How the `late-write` rule writes through a delivery attempt's transaction (given when it runs). */
  lateWrite: LateWriteProbe | undefined;
  /** How many copies of one call a concurrency rule sends at once. */
  concurrency: number;
  /** A ttl or lease meant to run out during the rule (100 ms times `timeScale`). */
  shortMs: number;
  /** A ttl or lease meant to hold for the whole rule (10 minutes). */
  longMs: number;
  /** A key of this run: `CONF.<run>.<label>.<n>:<state>`. */
  key(label: string, state?: string): string;
  /** A notification record for `key`, as the router stores it. */
  record(key: string, extra?: Record<string, unknown>): Record<string, unknown>;
  /** A lease with a new id: long unless `ms` is given. */
  lease(ms?: number): Lease;
  /** Lets `ms` of the store's time pass (real time, or the fake clock's `advance`). */
  pause(ms: number): Promise<void>;
  /** Polls `condition` until it holds, letting the store's time pass; a failure naming `what` if it never does. */
  eventually(what: string, condition: () => Promise<boolean>): Promise<void>;
  /** Receives `key` and fails its first attempt, due `dueInMs` from its receipt (in the past when < 0). */
  failed(key: string, dueInMs: number, record?: Record<string, unknown>): Promise<InboxEntry>;
  /** The entry of `key`, which must exist. */
  entry(key: string): Promise<InboxEntry>;
}

/** Options the kit is built from (resolved by the runner). */
export interface KitOptions {
  durable: boolean;
  concurrency: number;
  timeScale: number;
  advance: ((ms: number) => unknown) | undefined;
  lateWrite: LateWriteProbe | undefined;
}

/** Builds the kit of one rule over `store`. */
export function createKit(stores: [AnyStore, ...AnyStore[]], options: KitOptions, run: string): RuleKit {
  const [store] = stores;
  const shortMs = 100 * options.timeScale;
  let sequence = 0;
  const pause = async (ms: number): Promise<void> => {
    if (options.advance) await options.advance(ms);
    else await new Promise((resolve) => setTimeout(resolve, ms));
  };
  const kit: RuleKit = {
    store,
    at: (index) => stores[index % stores.length]!,
    durable: options.durable,
    lateWrite: options.lateWrite,
    concurrency: options.concurrency,
    shortMs,
    longMs: 10 * 60_000,
    key: (label, state = 'SUCCESSFUL') => `CONF.${run}.${label}.${(sequence += 1)}:${state}`,
    record: (key, extra = {}) => {
      const at = key.lastIndexOf(':');
      return {
        transaction_id: key.slice(0, at),
        state: key.slice(at + 1),
        amount: 1500,
        currency: 'XOF',
        custom_data: `order-${sequence}`,
        ...extra,
      };
    },
    lease: (ms = kit.longMs) => ({ id: randomUUID(), ms }),
    pause,
    async eventually(what, condition) {
      // Measured in the store's time (the pauses), so a fake clock needs no real waiting; generous, since a
      // shared machine may run a poll late. Conditions are never timed: only "it happens, eventually".
      const budget = shortMs * 20 + 5000 * options.timeScale;
      const step = Math.max(5, shortMs / 10);
      for (let waited = 0; ; waited += step) {
        if (await condition()) return;
        must(waited < budget, `${what}: still not so after ${budget} ms`);
        await pause(step);
      }
    },
    async failed(key, dueInMs, record = kit.record(key)) {
      const lease = kit.lease();
      must(await store.receive(key, record, lease), `receive(${key}) of a new key resolved false`);
      const { receivedAt } = await kit.entry(key);
      const nextAttemptAt = new Date(receivedAt.getTime() + dueInMs);
      const settled = await store.settle(key, lease.id, { status: 'failed', error: 'boom', nextAttemptAt });
      must(settled, `settle(${key}) by the lease that received it resolved false`);
      return kit.entry(key);
    },
    async entry(key) {
      const found = await store.get(key);
      must(found !== undefined, `get(${key}) resolved undefined for an entry the store holds`);
      return found;
    },
  };
  return kit;
}

/** Keys of `entries`, sorted, for comparing sets. */
export const keysOf = (entries: InboxEntry[]): string[] => entries.map((entry) => entry.key).sort();

/** Runs `count` copies of `call` at once (started in the same turn) and resolves their answers. */
export function atOnce<T>(count: number, call: (index: number) => Promise<T> | T): Promise<T[]> {
  return Promise.all(Array.from({ length: count }, async (_, index) => call(index)));
}
