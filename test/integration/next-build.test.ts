import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { Pool } from 'pg';
import { Redis } from 'ioredis';
import { ipnRouter, type IpnRouter, type Logger, type Store } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import { eventually } from '../helpers/services.js';

// `next build` imports every route module to collect its configuration, with NEXT_PHASE set: a router built
// there must not connect to the database, nor run a recovery pass (a build could deliver notifications
// against a production database, or print a stack when it cannot reach one).

/** A TCP server on loopback that accepts connections, counts them, and never answers. */
async function countingServer(): Promise<{
  port: number;
  accepted: () => number;
  close: () => Promise<void>;
}> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server: Server = createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    accepted: () => accepted,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A logger that keeps every warn and error line. */
function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    debug: () => {},
    info: () => {},
    warn: (_object, message) => lines.push(`WARN ${message}`),
    error: (_object, message) => lines.push(`ERROR ${message}`),
  };
}

type Client = { store: Store; end: () => Promise<void> };
const clients: Record<string, (port: number) => Client> = {
  PostgresStore: (port) => {
    const pool = new Pool({
      host: '127.0.0.1',
      port,
      user: 'postgres',
      database: 'test',
      max: 2,
      connectionTimeoutMillis: 1_000,
    });
    pool.on('error', () => {});
    return { store: new PostgresStore({ pool }), end: () => pool.end().catch(() => {}) };
  },
  RedisStore: (port) => {
    const redis = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0 });
    redis.on('error', () => {});
    return { store: new RedisStore({ client: redis }), end: () => Promise.resolve(redis.disconnect()) };
  },
};

const previous = process.env.NEXT_PHASE;
afterEach(() => {
  if (previous === undefined) delete process.env.NEXT_PHASE;
  else process.env.NEXT_PHASE = previous;
});

describe.each(Object.keys(clients))('a router built under next build, over %s', (name) => {
  it('makes no connection and logs no error, while a router built at runtime connects', async () => {
    const building = await countingServer();
    const serving = await countingServer();
    const built = clients[name]!(building.port);
    const run = clients[name]!(serving.port);
    const buildLogger = recordingLogger();
    const routers: IpnRouter<undefined, unknown>[] = [];
    try {
      process.env.NEXT_PHASE = 'phase-production-build';
      const atBuild = ipnRouter({
        store: built.store,
        delivery: 'at-least-once',
        statusClient: { getStatus: () => Promise.reject(new Error('no status query at build time')) },
        logger: buildLogger,
        storeTimeoutMs: 500,
      });
      atBuild.on('successful', () => {});
      routers.push(atBuild);
      // The runtime process (`next start`) imports the module again, with another phase.
      process.env.NEXT_PHASE = 'phase-production-server';
      const atRuntime = ipnRouter({
        store: run.store,
        delivery: 'at-least-once',
        logger: recordingLogger(),
        storeTimeoutMs: 500,
      });
      atRuntime.on('successful', () => {});
      routers.push(atRuntime);

      // Both routers' first recovery pass is due at once: once the runtime one has reached its store, the
      // build one would have too.
      await eventually('the runtime router connects to its store', () => serving.accepted() > 0);
      expect(building.accepted()).toBe(0);
      expect(buildLogger.lines).toEqual([]);
    } finally {
      // The servers first: a client waiting for an answer that never comes would hold the pool's end.
      const closed = Promise.all([building.close(), serving.close()]);
      await Promise.all(routers.map((router) => router.close({ timeoutMs: 0 })));
      await Promise.all([built.end(), run.end(), closed]);
    }
    expect(building.accepted()).toBe(0);
  });
});
