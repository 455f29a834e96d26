import { randomUUID } from 'node:crypto';
import type { DurableStore, Store } from '../stores/store.js';
import { messageOf } from '../shared/errors.js';
import { CLAIM_RULES } from './store-conformance-claims.js';
import { CRASH_RULES } from './store-conformance-crash.js';
import { EXPECTATION_RULES } from './store-conformance-expectations.js';
import { LATE_WRITE_RULES } from './store-conformance-late-write.js';
import { LEASE_RULES } from './store-conformance-leases.js';
import { LIFECYCLE_RULES } from './store-conformance-lifecycle.js';
import {
  createKit,
  RuleFailure,
  type AnyStore,
  type LateWriteProbe,
  type Rule,
  type StoreConformanceResult,
} from './store-conformance-kit.js';
import { OPERATOR_RULES } from './store-conformance-operator.js';
import { RETENTION_RULES } from './store-conformance-retention.js';
import { RECEIVE_RULES } from './store-conformance-receive.js';
import { REPLACE_RULES } from './store-conformance-replace.js';
import { SETTLE_RULES } from './store-conformance-settle.js';

export type { ConformanceFailure, LateWriteProbe, StoreConformanceResult } from './store-conformance-kit.js';

/** Every rule, in the order they run. */
const RULES: Rule[] = [
  ...CLAIM_RULES,
  ...RECEIVE_RULES,
  ...LEASE_RULES,
  ...SETTLE_RULES,
  ...REPLACE_RULES,
  ...OPERATOR_RULES,
  ...RETENTION_RULES,
  ...CRASH_RULES,
  ...EXPECTATION_RULES,
  ...LIFECYCLE_RULES,
  ...LATE_WRITE_RULES,
];

/** The names of the rules, for `skip`. */
const STORE_CONFORMANCE_RULES: readonly string[] = RULES.map((rule) => rule.name);

/** Options of {@link runStoreConformance}. */
export interface StoreConformanceOptions {
  /**
   * How many copies of one call the concurrency rules send at once (claims of one key, receives of one key).
   * @default 50
   */
  concurrency: number;
  /**
   * Whether to run the rules of a durable store (the inbox of `delivery: 'at-least-once'`).
   * @default store.durable === true
   */
  durable: boolean;
  /**
   * Multiplies the short ttl and lease the expiry rules wait out (100 ms), and how long they poll for it:
   * raise it for a backend whose expiry is coarse (a store that compares whole seconds: 20).
   * @default 1
   */
  timeScale: number;
  /**
   * Lets `ms` milliseconds of the store's time pass: give your fake clock's advance, and the expiry rules
   * run without waiting. The store must then read its time from that clock.
   * @default undefined: real time passes (the rules poll, a few ms apart)
   */
  advance: ((ms: number) => void | Promise<void>) | undefined;
  /**
   * Opens a second instance over the same data as `store`, as another process of your app would (its own
   * client or pool, the same table or key prefix). Given, the concurrency rules send their calls to both
   * by turns, and an entry whose instance crashed is taken up by the other one: claims stay atomic, and
   * leases disjoint, across instances, not only within one. It is closed after the rule, as `store` is.
   * @default undefined: one instance takes every call
   */
  openPeer:
    ((store: Store | DurableStore) => Store | DurableStore | Promise<Store | DurableStore>) | undefined;
  /**
   * Rules not to run, by name: those your store documents that it does not follow (they are listed in
   * `skipped`, with the reason "skipped by the options").
   * @default []
   */
  skip: string[];
  /**
   * Runs these rules only, by name (the others are listed in `skipped`, with the reason "not in only"):
   * `['late-write']` while you work on your transactions.
   * @default undefined: every rule
   */
  only: string[] | undefined;
  /**
   * For a store with transactional delivery (`begin`), or one given your own `Transactions`: how the
   * `late-write` rule writes through an attempt's `tx` (and `db`), as a listener credits an order, and reads
   * whether that write landed. The rule opens an attempt, writes in time, ends it (abandoned with its
   * listeners still running; failed; delivered), then writes again: every late write must reject and land
   * nowhere, and the write in time must land only when delivered. Without it the rule is skipped.
   * @default undefined
   */
  lateWrite: LateWriteProbe | undefined;
  /**
   * How long one rule may run before it counts as failed (a call that never answers).
   * @default 30_000 times `timeScale`
   */
  ruleTimeoutMs: number;
}

/**
 * Checks that a store keeps every rule the router relies on, as stated on `Store`, `DurableStore` and
 * `ExpectationStore`: atomic claims under concurrency, claims that expire, the same claim asked twice, leases
 * that never overlap and run out, settlements guarded by their lease, a replace that never passes through
 * "absent", replay, purge, the operator's list and counts, and what a crash between two calls leaves. It is
 * how you trust a store of your own (over MongoDB, DynamoDB, ...), and how ipn-kit checks its own.
 *
 * Plain async code, with no test framework: run it from yours. Each rule runs on a store of its own, from
 * `createStore()`, which must answer a new, empty one (a new table, a new key prefix); the rule then calls
 * the store's `close()`, if it has one. A rule that fails (a wrong answer, a call that throws or never
 * answers) is recorded, and the others still run. Rules that do not apply (the inbox's, when the store is
 * not durable; `countByStatus` and `expectations`, when absent) are listed in `skipped`.
 *
 * It takes a few seconds: the expiry rules wait out a 100 ms ttl or lease each (see `timeScale`, `advance`).
 *
 * @param createStore Answers a new, empty store (or a promise of one) each time it is called.
 * @returns Resolves `{ failures, passed, skipped }`; `failures` is empty when the store conforms. A store
 * that throws, rejects or never answers is a failure of the rule, never a rejection.
 * @throws TypeError (as a rejection) when an option is not valid: an unknown rule name in `skip`, a
 * concurrency below 2.
 * @example
 * const { failures } = await runStoreConformance(() => new MongoStore({ collection: newCollection() }));
 * expect(failures).toEqual([]);
 */
export async function runStoreConformance(
  createStore: () => Store | DurableStore | Promise<Store | DurableStore>,
  options: Partial<StoreConformanceOptions> = {},
): Promise<StoreConformanceResult> {
  const resolved = resolve(createStore, options);
  const result: StoreConformanceResult = { failures: [], passed: [], skipped: [] };
  const run = randomUUID().slice(0, 8);
  for (const rule of RULES) {
    if (resolved.skip.includes(rule.name)) {
      result.skipped.push({ rule: rule.name, reason: 'skipped by the options' });
      continue;
    }
    if (resolved.only !== undefined && !resolved.only.includes(rule.name)) {
      result.skipped.push({ rule: rule.name, reason: 'not in only' });
      continue;
    }
    const failure = await runRule(rule, createStore, resolved, run, result);
    if (failure === null) result.passed.push(rule.name);
    else if (failure !== undefined) result.failures.push({ rule: rule.name, message: failure });
  }
  return result;
}

type Resolved = Omit<StoreConformanceOptions, 'durable'> & { durable: boolean | undefined };

/** Runs one rule on a new store: `null` when it held, its failure's message, or `undefined` when skipped. */
async function runRule(
  rule: Rule,
  createStore: () => Store | DurableStore | Promise<Store | DurableStore>,
  options: Resolved,
  run: string,
  result: StoreConformanceResult,
): Promise<string | null | undefined> {
  let store: AnyStore;
  try {
    store = (await createStore()) as AnyStore;
  } catch (error) {
    return `createStore() failed: ${messageOf(error)}`;
  }
  let peer: AnyStore | undefined;
  try {
    const reason = notApplicable(rule, store, options);
    if (reason !== undefined) {
      result.skipped.push({ rule: rule.name, reason });
      return undefined;
    }
    if (options.openPeer) peer = (await options.openPeer(store)) as AnyStore;
    const durable = isDurable(store, options);
    const kit = createKit(
      peer ? [store, peer] : [store],
      { ...options, durable },
      `${run}.${result.passed.length + result.failures.length}`,
    );
    await within(rule.run(kit), options.ruleTimeoutMs);
    return null;
  } catch (error) {
    return error instanceof RuleFailure ? error.message : `a call threw: ${messageOf(error)}`;
  } finally {
    for (const opened of peer ? [peer, store] : [store]) {
      try {
        await opened.close?.();
      } catch {
        // The rule's verdict stands; a store that fails to close is the partner's to see in their own tests.
      }
    }
  }
}

/** Why `rule` does not apply to `store`, or `undefined` when it does. */
function notApplicable(rule: Rule, store: AnyStore, options: Resolved): string | undefined {
  if (rule.needs === 'store') return undefined;
  if (rule.needs === 'lifecycle') {
    return store.lifecycle === undefined
      ? 'the store has no lifecycle (optional: the router keeps one in its own memory instead)'
      : undefined;
  }
  if (!isDurable(store, options)) return 'the store is not durable (at most once only)';
  if (rule.needs === 'countByStatus' && typeof store.countByStatus !== 'function')
    return 'the store has no countByStatus() (optional)';
  if (rule.needs === 'expectations' && store.expectations === undefined)
    return 'the store has no expectations (optional)';
  if (rule.needs === 'redact' && typeof store.redact !== 'function')
    return 'the store has no redact() (optional)';
  if (rule.needs === 'audit' && store.audit === undefined) return 'the store has no audit log (optional)';
  if (rule.needs === 'pauseSwitch' && store.pauseSwitch === undefined)
    return 'the store has no pause switch (optional: ipn.pause() then holds one instance)';
  if (rule.needs === 'replayWith' && typeof store.replayWith !== 'function')
    return 'the store has no replayWith() (optional: a forged copy kept as unexpected then stays kept)';
  if (rule.needs === 'lateWrite' && typeof store.begin !== 'function')
    return 'the store has no begin() (optional: no transactional delivery)';
  if (rule.needs === 'lateWrite' && options.lateWrite === undefined)
    return 'no lateWrite option: the kit cannot write through your transaction by itself';
  return undefined;
}

/** Whether the inbox's rules run on `store`: as `options.durable` says, else as the store says. */
const isDurable = (store: AnyStore, options: Resolved): boolean => options.durable ?? store.durable === true;

/** Rejects when `work` has not settled within `ms` (its calls may still run: a store cannot be cancelled). */
async function within(work: Promise<void>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new RuleFailure(`the rule did not finish within ${ms} ms (a call never answered?)`)),
      ms,
    );
  });
  try {
    await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The options with their defaults, checked. */
function resolve(createStore: unknown, options: Partial<StoreConformanceOptions>): Resolved {
  if (typeof createStore !== 'function') {
    throw new TypeError(
      `runStoreConformance: createStore must be a function answering a new store, got ${typeof createStore}`,
    );
  }
  const {
    concurrency = 50,
    timeScale = 1,
    advance,
    openPeer,
    skip = [],
    only,
    durable,
    lateWrite,
  } = options ?? {};
  if (!Number.isInteger(concurrency) || concurrency < 2) {
    throw new TypeError(
      `runStoreConformance: concurrency must be a whole number of at least 2, got ${concurrency}`,
    );
  }
  if (!Number.isFinite(timeScale) || timeScale <= 0) {
    throw new TypeError(`runStoreConformance: timeScale must be a positive number, got ${timeScale}`);
  }
  if (openPeer !== undefined && typeof openPeer !== 'function') {
    throw new TypeError(
      `runStoreConformance: openPeer must be a function (store) => another instance over its data, got ${typeof openPeer}`,
    );
  }
  if (advance !== undefined && typeof advance !== 'function') {
    throw new TypeError(
      `runStoreConformance: advance must be a function (ms) => void, got ${typeof advance}`,
    );
  }
  checkNames('skip', skip);
  if (only !== undefined) checkNames('only', only);
  if (
    lateWrite !== undefined &&
    (typeof lateWrite !== 'object' ||
      lateWrite === null ||
      typeof lateWrite.write !== 'function' ||
      typeof lateWrite.landed !== 'function')
  ) {
    throw new TypeError(
      'runStoreConformance: lateWrite must be { write(through, id), landed(id) }, got ' +
        (lateWrite === null ? 'null' : typeof lateWrite),
    );
  }
  const ruleTimeoutMs = options.ruleTimeoutMs ?? 30_000 * timeScale;
  if (!Number.isFinite(ruleTimeoutMs) || ruleTimeoutMs <= 0) {
    throw new TypeError(
      `runStoreConformance: ruleTimeoutMs must be a positive number of milliseconds, got ${ruleTimeoutMs}`,
    );
  }
  return { concurrency, timeScale, advance, openPeer, skip, only, durable, lateWrite, ruleTimeoutMs };
}

/** Throws unless `names` (the option `option`) is an array of rule names. */
function checkNames(option: 'skip' | 'only', names: unknown): void {
  const unknown = (Array.isArray(names) ? names : [names]).filter(
    (name) => !STORE_CONFORMANCE_RULES.includes(name as string),
  );
  if (!Array.isArray(names) || unknown.length > 0) {
    throw new TypeError(
      `runStoreConformance: ${option} must list rule names, got ${unknown.map(String).join(', ') || typeof names} (the rules: ${STORE_CONFORMANCE_RULES.join(', ')})`,
    );
  }
}
