/**
 * The MemoryStore's footprint and speed, alone in a process run with `--expose-gc` (bench/run.ts runs
 * `node --expose-gc --import tsx bench/memory.ts`; BENCH_MEMORY_KEYS sets the count, 1,000,000 by default).
 * Sends `{ type: 'memory', result }` (a `MemoryResult`) over IPC, or prints it when run by hand.
 *
 * Keys are built as the router builds them, `${transaction_id}:${state}`, from ids like `PIX_22827809`; the
 * TTL is a week (the router's default) and `maxEntries` is the key count, so nothing expires or is evicted.
 */
import { MemoryStore } from '../lib/index.js';

/** The figures, for `keys` distinct keys. */
export interface MemoryResult {
  keys: number;
  /** Heap held by a store of `keys` live keys (heapUsed after minus before, each after a full GC), bytes. */
  heapBytes: number;
  /** The same, in MB of 10^6 bytes. */
  heapMB: number;
  /** Bytes per key. */
  bytesPerKey: number;
  /** Mean cost of a claim of a new key, over `keys` claims, in microseconds. */
  claimMicros: number;
  /** Mean cost of a claim of a key already held (a resend), in microseconds. */
  resendMicros: number;
  /** Keys the store held and evicted at the end of the heap measurement (expected: `keys` and 0). */
  size: number;
  evictions: number;
}

const TTL = 7 * 24 * 60 * 60 * 1000;
const FIRST_ID = 22_827_809;

const keyOf = (index: number): string => `PIX_${FIRST_ID + index}:SUCCESSFUL`;

function collect(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run bench/memory.ts with node --expose-gc');
  // Twice: the first pass may leave garbage that finalisers only release on the second.
  gc();
  gc();
}

function heapUsed(): number {
  collect();
  return process.memoryUsage().heapUsed;
}

/** Heap held by `count` live keys. The keys are built in the loop, so only the store holds them. */
function measureHeap(count: number): Pick<MemoryResult, 'heapBytes' | 'size' | 'evictions'> {
  const before = heapUsed();
  const store = new MemoryStore({ maxEntries: count });
  for (let index = 0; index < count; index += 1) store.claim(keyOf(index), TTL);
  const heapBytes = heapUsed() - before;
  return { heapBytes, size: store.size, evictions: store.evictions };
}

/** Mean microseconds per call of `claim` for each key of `keys`, on `store`. */
function timeClaims(store: MemoryStore, keys: string[]): number {
  const start = process.hrtime.bigint();
  for (const key of keys) store.claim(key, TTL);
  return Number(process.hrtime.bigint() - start) / 1000 / keys.length;
}

function measure(count: number): MemoryResult {
  const { heapBytes, size, evictions } = measureHeap(count);
  // Keys built beforehand, so that only the claims are timed.
  const keys = Array.from({ length: count }, (_, index) => keyOf(index));
  collect();
  const store = new MemoryStore({ maxEntries: count });
  const claimMicros = timeClaims(store, keys);
  const resendMicros = timeClaims(store, keys);
  return {
    keys: count,
    heapBytes,
    heapMB: heapBytes / 1e6,
    bytesPerKey: heapBytes / count,
    claimMicros,
    resendMicros,
    size,
    evictions,
  };
}

const result = measure(Number(process.env.BENCH_MEMORY_KEYS ?? 1_000_000));
if (process.send) process.send({ type: 'memory', result }, () => process.exit(0));
else console.log(result);
