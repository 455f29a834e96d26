/**
 * `npx tsx bench/stages.ts` (also run by `npm run bench`): the CPU one request costs in each stage of the
 * router's pipeline (read the body, parse, validate, dedupe, emit, answer) and through each adapter
 * (node:http, Express, fetch), measured in this one process over many calls of the plain functions, each
 * against the same work done by hand. A table with a budget per row says PASS or OVER, so that a regression
 * shows where it came from. See bench/README.md ("Per-stage budget").
 *
 * Robust on a loaded machine: CPU time of this process (`process.cpuUsage`), not wall time; the rows run
 * interleaved, round after round, each row's figure divided by the hand-written `node:http` server's of the
 * same round (`× raw`), and the median of the rounds is what is judged. Never a test: it exits 0 whatever the
 * figures say (1 only when a row could not run at all).
 */
import { IncomingMessage, ServerResponse, type RequestListener } from 'node:http';
import type { Socket } from 'node:net';
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import express from 'express';
import { ipnRouter, type IpnRouter } from '../lib/index.js';
import { readBody } from '../lib/body/read-body.js';
import { parseContentType } from '../lib/body/content-type.js';
import { parseBody } from '../lib/body/parse-body.js';
import {
  ipnNotificationSchema,
  parseNotification,
  type IpnNotification,
} from '../lib/notification/schema.js';
import { createDelivery } from '../lib/delivery/delivery.js';
import { createStoreClaimer } from '../lib/delivery/store-claimer.js';
import { createSafeEmitter } from '../lib/delivery/safe-emitter.js';
import { resolveOptions } from '../lib/config/options.js';
import { guardLogger } from '../lib/observability/logger.js';
import { createMetrics } from '../lib/observability/metrics.js';
import { OK_BODY } from '../lib/pipeline/ipn-outcome.js';
import { replyOf } from '../lib/pipeline/serve.js';
import { bodyFor } from './payload.js';
import { rawJson } from './raw-json.js';
import { stagesTable, stageVerdict, type StageResult, type StageSettings } from './stage-table.js';

/** One row of the table: a stage or a whole request, measured over `count` calls per round. */
interface Row {
  /** `stage` rows are one step of the pipeline; `adapter` rows a whole request through a handler. */
  group: 'stage' | 'adapter';
  name: string;
  /** The hand-written work it is compared with, shown beside it; a reference row has none. */
  reference?: string;
  /** The most this row may cost, in `× raw` (a multiple of the hand-written node:http server's CPU). */
  budget?: number;
  /**
   * Whether `budget` is a multiple of the row's reference rather than of the raw server: for an adapter on
   * a framework, whose own cost (Express's) is not the router's to cut.
   */
  budgetAgainst?: 'reference';
  /**
   * One call: makes its own input (a request object, a body, a notification: what node:http and the stages
   * before it would have made), then does the row's work. Resolves when that work is done, if it is async.
   */
  call: () => unknown;
}

/** The row every figure is divided by: read the body, `JSON.parse`, answer 200, on node:http by hand. */
const RAW = 'node:http by hand (JSON.parse, 200)';

const makeBody = bodyFor();
let sequence = 0;
/** A body with a transaction id never used before in this process: every request takes the full path. */
const freshBody = (): Buffer => Buffer.from(makeBody(`ST.${process.pid}.${(sequence += 1)}`));

/** The socket a request made here stands on: never readable (the body is pushed), never destroyed. */
const SOCKET = { readable: false, destroyed: false, readableHighWaterMark: 16_384 } as unknown as Socket;
const HEADERS = { 'content-type': 'application/json', host: '127.0.0.1' };

/**
 * An `IncomingMessage` as node:http's parser leaves it for a handler: method, url and headers set, the body
 * pushed and the message complete. Only the socket is missing (nothing is written to a wire).
 */
function requestOf(body: Buffer, url = '/ipn'): IncomingMessage {
  const req = new IncomingMessage(SOCKET);
  req.method = 'POST';
  req.url = url;
  req.httpVersionMajor = 1;
  req.httpVersionMinor = 1;
  req.headers = { ...HEADERS, 'content-length': String(body.length) };
  req.push(body);
  req.push(null);
  req.complete = true;
  return req;
}

/** A request and its response, whose `end` resolves `ended`: without a socket, 'finish' never comes. */
function exchangeOf(body: Buffer, url?: string) {
  const req = requestOf(body, url);
  const res = new ServerResponse(req);
  let resolve!: () => void;
  const ended = new Promise<void>((done) => (resolve = done));
  const end = res.end.bind(res);
  res.end = ((...args: Parameters<typeof end>) => {
    const result = end(...args);
    resolve();
    return result;
  }) as typeof res.end;
  return { req, res, ended };
}

/** A whole request through `handler`, resolving once the answer is written. */
function through(handler: RequestListener, url?: string): Row['call'] {
  return () => {
    const { req, res, ended } = exchangeOf(freshBody(), url);
    handler(req, res);
    return ended;
  };
}

/** Reading a body by hand, as `rawJson` does. */
const rawRead = (req: IncomingMessage): Promise<Buffer> =>
  new Promise((resolve) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks)));
  });

/** A router as the bench's servers make it: default options, one `successful` listener. */
function router(): IpnRouter {
  const ipn = ipnRouter();
  ipn.on('successful', () => {});
  return ipn;
}

/** The delivery a default router makes (MemoryStore, at most once), for the dedupe and emit stages. */
function delivery() {
  const checked = resolveOptions({});
  const options = { ...checked, logger: guardLogger(checked.logger) };
  const metrics = createMetrics();
  const emitters = createSafeEmitter(options.logger, () => undefined, metrics.count, true);
  emitters.methods.on('successful', () => {});
  const claimer = createStoreClaimer(options.store, options.ttlMs, options.storeTimeoutMs);
  return createDelivery(options, emitters, claimer, metrics);
}

/** A valid notification, as `validate` leaves it, with a transaction id never used before. */
const notification = (() => {
  const parsed = ipnNotificationSchema.safeParse(JSON.parse(freshBody().toString('utf8')));
  if (!parsed.success) throw new Error('bench/stages: the payload is not a valid notification');
  const template = parsed.data;
  return (): IpnNotification => ({ ...template, transaction_id: `ST.${process.pid}.${(sequence += 1)}` });
})();

const record = (): unknown => JSON.parse(freshBody().toString('utf8'));

function rows(): Row[] {
  const atMostOnce = delivery();
  const expressRouter = express();
  expressRouter.use('/ipn', router());
  const bareExpress = express();
  bareExpress.use(express.json());
  bareExpress.post('/ipn', (_req, res) => {
    res.status(200).json({ ok: true });
  });
  const fetchRouter = router();
  const url = 'http://127.0.0.1/ipn';
  const requestOfFetch = (): Request =>
    new Request(url, { method: 'POST', headers: HEADERS, body: new Uint8Array(freshBody()) });
  const responseOf = (): ServerResponse => new ServerResponse(requestOf(Buffer.alloc(0)));
  return [
    { group: 'adapter', name: RAW, call: through(rawJson()) },
    {
      group: 'stage',
      name: 'read: readBody()',
      reference: 'read by hand (data, concat)',
      budget: 1.5,
      call: () => readBody(requestOf(freshBody()), 1_048_576, undefined),
    },
    {
      group: 'stage',
      name: 'read by hand (data, concat)',
      call: () => rawRead(requestOf(freshBody())),
    },
    {
      group: 'stage',
      name: 'parse: parseContentType() + parseBody()',
      reference: 'parse by hand (JSON.parse)',
      budget: 0.25,
      call: () => {
        const type = parseContentType('application/json');
        if (type.ok) parseBody(freshBody(), type.format, type.charset);
      },
    },
    {
      group: 'stage',
      name: 'parse by hand (JSON.parse)',
      call: () => JSON.parse(freshBody().toString('utf8')) as unknown,
    },
    {
      group: 'stage',
      name: 'validate: parseNotification() (fast path, zod for the rest)',
      reference: 'parse by hand (JSON.parse)',
      budget: 0.5,
      call: () => parseNotification(record()),
    },
    {
      group: 'stage',
      name: 'validate by zod alone (ipnNotificationSchema.safeParse)',
      call: () => ipnNotificationSchema.safeParse(record()),
    },
    {
      group: 'stage',
      name: 'dedupe: accept() (MemoryStore claim)',
      budget: 0.2,
      call: () => atMostOnce.accept(notification()),
    },
    {
      group: 'stage',
      name: 'emit: dispatch() (one listener)',
      budget: 0.1,
      call: () => atMostOnce.dispatch(notification(), ''),
    },
    {
      group: 'stage',
      name: 'answer: replyOf() + writeHead() + end()',
      reference: 'answer by hand (writeHead, end)',
      budget: 0.6,
      call: () => {
        const res = responseOf();
        const reply = replyOf({ status: 200, body: OK_BODY }, false);
        res.writeHead(reply.status, reply.headers);
        res.end(reply.body);
      },
    },
    {
      group: 'stage',
      name: 'answer by hand (writeHead, end)',
      call: () => {
        responseOf().writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      },
    },
    {
      group: 'adapter',
      name: 'node:http: http.createServer(ipnRouter())',
      reference: RAW,
      budget: 3.5,
      call: through(router()),
    },
    { group: 'adapter', name: 'Express by hand: express.json(), 200', call: through(bareExpress) },
    {
      group: 'adapter',
      name: "Express: app.use('/ipn', ipnRouter())",
      reference: 'Express by hand: express.json(), 200',
      budget: 1.6,
      budgetAgainst: 'reference',
      call: through(expressRouter),
    },
    {
      group: 'adapter',
      name: 'fetch by hand: request.json(), new Response()',
      call: async () => {
        await requestOfFetch().json();
        return new Response('{"ok":true}', { headers: { 'content-type': 'application/json' } });
      },
    },
    {
      group: 'adapter',
      name: 'fetch: ipn.fetch(request)',
      reference: 'fetch by hand: request.json(), new Response()',
      budget: 3.5,
      budgetAgainst: 'reference',
      call: () => fetchRouter.fetch(requestOfFetch()),
    },
  ];
}

/** Lets the work queued after the last call (the listeners after an answer, stream ends) run. */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** CPU microseconds per call of `row`, over `count` calls made one after the other. */
async function measure(row: Row, count: number): Promise<number> {
  const { call } = row;
  await settle();
  const start = process.cpuUsage();
  for (let index = 0; index < count; index += 1) {
    const result = call();
    if (result instanceof Promise) await result;
  }
  await settle();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / count;
}

const quantile = (values: number[], q: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
};

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};

/** The figure a row's budget is judged on: its ratio to the raw server, or to its reference. */
function judged(row: Row, ratio: number, referenceRatio: number | null): number {
  return row.budgetAgainst === 'reference' && referenceRatio !== null ? referenceRatio : ratio;
}

/** Bursts of each side per row per round. */
const BURSTS = 4;

let gcOnce: ((options?: { type: 'minor' | 'major' }) => void) | undefined;
const gc = (options?: { type: 'minor' | 'major' }): void => {
  if (gcOnce === undefined) {
    setFlagsFromString('--expose-gc');
    gcOnce = runInNewContext('gc') as typeof gcOnce;
  }
  gcOnce!(options);
};
const collect = (): void => gc();
/** A collection of the young generation only: a few milliseconds, so it can come before each burst. */
const collectYoung = (): void => gc({ type: 'minor' });

/**
 * Measures every row `rounds` times, after one round of warm-up that also sizes the counts. In each round,
 * each row is measured in short bursts alternating with the raw server's, its ratio taken to that
 * neighbour: load that comes and goes on the machine touches both alike.
 */
export async function measureStages(settings: StageSettings): Promise<StageResult[]> {
  const only = settings.only;
  const every = rows();
  const chosen = every.filter(
    (row) => only === undefined || row.name === RAW || row.name.toLowerCase().includes(only.toLowerCase()),
  );
  // A chosen row's reference is measured too: its budget may be a multiple of it.
  const all = every.filter((row) => chosen.includes(row) || chosen.some((c) => c.reference === row.name));
  const raw = all.find((row) => row.name === RAW)!;
  const counts = new Map<Row, number>();
  for (const row of all) {
    // Warm-up: the JIT settles, and the count is sized to about `millisPerRow` of CPU per round.
    await measure(row, 300);
    const micros = await measure(row, 500);
    counts.set(row, Math.max(100, Math.min(50_000, Math.round((settings.millisPerRow * 1000) / micros))));
  }
  const micros = new Map<Row, number[]>(all.map((row) => [row, []]));
  const ratios = new Map<Row, number[]>(all.map((row) => [row, []]));
  for (let round = 0; round < settings.rounds; round += 1) {
    for (const row of all) {
      // Short bursts, the raw server's and the row's in turn: a burst of load elsewhere on the machine
      // lands on both about equally, where one long measurement each would catch it on one side only.
      let base = 0;
      let value = 0;
      collect();
      for (let burst = 0; burst < BURSTS; burst += 1) {
        collectYoung();
        base += await measure(raw, Math.ceil(counts.get(raw)! / BURSTS));
        collectYoung();
        value += row === raw ? 0 : await measure(row, Math.ceil(counts.get(row)! / BURSTS));
      }
      if (row === raw) value = base;
      micros.get(row)!.push(value / BURSTS);
      ratios.get(row)!.push(value / base);
    }
  }
  return all.map((row) => {
    const ratio = median(ratios.get(row)!);
    const reference = row.reference === undefined ? undefined : all.find((r) => r.name === row.reference);
    const referenceRatio = reference ? ratio / median(ratios.get(reference)!) : null;
    return {
      group: row.group,
      name: row.name,
      reference: row.reference ?? null,
      micros: median(micros.get(row)!),
      ratio,
      spread: [quantile(ratios.get(row)!, 0.25), quantile(ratios.get(row)!, 0.75)],
      referenceRatio,
      budget: row.budget ?? null,
      budgetAgainst: row.budgetAgainst === 'reference' ? 'reference' : 'raw',
      status:
        row.budget === undefined ? null : judged(row, ratio, referenceRatio) <= row.budget ? 'PASS' : 'OVER',
    };
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      rounds: { type: 'string', default: process.env.BENCH_STAGE_ROUNDS ?? '9' },
      ms: { type: 'string', default: process.env.BENCH_STAGE_MS ?? '40' },
      quick: { type: 'boolean', default: false },
      only: { type: 'string' },
    },
  });
  const settings: StageSettings = {
    rounds: values.quick ? 5 : Number(values.rounds),
    millisPerRow: values.quick ? 15 : Number(values.ms),
    only: values.only,
  };
  const results = await measureStages(settings);
  if (process.send) {
    process.send({ type: 'stages', results, settings }, () => process.exit(0));
    return;
  }
  console.log(
    `bench/stages: ${settings.rounds} rounds, about ${settings.millisPerRow} ms of CPU per row per round; ` +
      "medians over the rounds; × raw = CPU per call / the hand-written node:http server's, same round\n",
  );
  console.log(stagesTable(results));
  console.log(`\n${stageVerdict(results)}`);
  process.exit(0);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    console.error(`bench/stages: ${error instanceof Error ? error.stack : String(error)}`);
    process.exit(1);
  });
}
