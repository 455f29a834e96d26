import type { FakeTransaction } from './fake-provider-record.js';
import { statusForm } from './fake-provider-record.js';

/** An answer of the status endpoint: the HTTP status and the JSON body. */
export interface StatusAnswer {
  status: number;
  body: { data: unknown; message: string; statut_code: number };
}

/** What the status desk needs from the provider. */
export interface StatusDeskConfig {
  blockAfter: number | undefined;
  blockForMs: number;
  dataShape: 'object' | 'array';
  /** The transaction of `transactionId`, when `apiKey` is the key it was created under. */
  find: (transactionId: string, apiKey: string) => FakeTransaction | undefined;
  /** @default Date.now */
  now?: () => number;
}

/** Answers status queries, counts them, and blocks a caller who asks too often. */
export interface StatusDesk {
  /** Answers one status query, given its raw body. Every call counts, blocked or not. */
  answer(body: string): StatusAnswer;
  /** Blocks every further query until `unblock()`, or for `blockForMs`. */
  block(): void;
  /** Lifts a block and starts the `blockAfter` count again. */
  unblock(): void;
  /** Status queries received, blocked included. */
  readonly queries: number;
  /** Status queries answered 429. */
  readonly blocked: number;
  /** Status queries that named this transaction id. */
  queriesFor(transactionId: string): number;
}

/**
 * The 429 answer. As the service documents, its message gives the wait when the block has an end (in
 * seconds, rounded up): `too many requests: caller blocked, retry in 30 seconds`.
 */
function blockedAnswer(waitMs: number): StatusAnswer {
  const wait = Number.isFinite(waitMs) ? `, retry in ${Math.ceil(waitMs / 1000)} seconds` : '';
  return {
    status: 429,
    body: { data: [], message: `too many requests: caller blocked${wait}`, statut_code: 429 },
  };
}

/**
 * The status endpoint as plain values. Answers, in this order of checks:
 *
 * | HTTP | body | when |
 * |---|---|---|
 * | 429 | `{ data: [], message: 'too many requests: caller blocked, retry in N seconds', statut_code: 429 }` (no wait when the block has no end) | blocked |
 * | 400 | `{ data: [], message: '...', statut_code: 400 }` | not JSON, or no `api_key` / `transaction_ids` |
 * | 200 | `{ data: [id], message: 'transaction not found', statut_code: 404 }` | unknown id, or wrong key |
 * | 200 | `{ data: record (or [record]), message: '', statut_code: 200 }` | found |
 */
export function createStatusDesk(config: StatusDeskConfig): StatusDesk {
  const now = config.now ?? Date.now;
  const perId = new Map<string, number>();
  let queries = 0;
  let blocked = 0;
  let blockedUntil: number | undefined;
  let answeredSinceBlock = 0;

  const isBlocked = (): boolean => {
    const time = now();
    if (blockedUntil !== undefined && time < blockedUntil) return true;
    if (blockedUntil !== undefined) unblock();
    if (config.blockAfter !== undefined && answeredSinceBlock >= config.blockAfter) {
      blockedUntil = time + config.blockForMs;
      return true;
    }
    answeredSinceBlock += 1;
    return false;
  };

  function unblock(): void {
    blockedUntil = undefined;
    answeredSinceBlock = 0;
  }

  return {
    answer(text) {
      queries += 1;
      const query = readQuery(text);
      if (query.transactionId !== undefined) {
        perId.set(query.transactionId, (perId.get(query.transactionId) ?? 0) + 1);
      }
      if (isBlocked()) {
        blocked += 1;
        return blockedAnswer((blockedUntil ?? Infinity) - now());
      }
      if (query.problem !== undefined) {
        return { status: 400, body: { data: [], message: query.problem, statut_code: 400 } };
      }
      const id = query.transactionId ?? '';
      const transaction = config.find(id, query.apiKey ?? '');
      if (transaction === undefined) {
        return { status: 200, body: { data: [id], message: 'transaction not found', statut_code: 404 } };
      }
      const record = statusForm(transaction);
      const data = config.dataShape === 'array' ? [record] : record;
      return { status: 200, body: { data, message: '', statut_code: 200 } };
    },
    block() {
      blockedUntil = now() + config.blockForMs;
    },
    unblock,
    get queries() {
      return queries;
    },
    get blocked() {
      return blocked;
    },
    queriesFor: (transactionId) => perId.get(transactionId) ?? 0,
  };
}

/** The fields of a status query, or why it cannot be answered. */
interface Query {
  apiKey?: string;
  transactionId?: string;
  problem?: string;
}

const EXPECTED = 'a JSON body { "api_key": "...", "transaction_ids": "..." }';

function readQuery(text: string): Query {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return { problem: `the body is not JSON: expected ${EXPECTED}` };
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { problem: `the body is not a JSON object: expected ${EXPECTED}` };
  }
  const fields = body as Record<string, unknown>;
  // The request examples name it transaction_ids; the prose of the reference, transaction_id.
  const id = fields.transaction_ids ?? fields.transaction_id;
  const transactionId = typeof id === 'string' && id !== '' ? id : undefined;
  const apiKey = typeof fields.api_key === 'string' ? fields.api_key : undefined;
  if (transactionId === undefined)
    return { apiKey, problem: `transaction_ids is missing: expected ${EXPECTED}` };
  if (apiKey === undefined) return { transactionId, problem: `api_key is missing: expected ${EXPECTED}` };
  return { apiKey, transactionId };
}
