/**
 * The architecture, checked by `npm run lint`: no import cycle, and each folder of lib/ imports only the
 * folders below it. Bottom to top:
 */
const LAYERS = [
  'shared', // what every folder uses: the errors, a timeout, the clock, a sliding window, safe JSON
  'notification', // the notification's zod schema and types, custom_data
  'body', // reading and parsing a request body: content types, decompression, JSON and forms
  'observability', // logger, log throttle, redaction, metrics
  'authenticate', // the IPN address token, authenticate and the HMAC authenticator
  'stores', // the Store interface and its backends (they take the user's client)
  'status', // the status client, its guard, and the comparison verify makes
  'config', // the router's options and their defaults
  'delivery', // dedupe claims, the verify queue, durable delivery, the emitter
  'pipeline', // the request flow: IpnRequest in, IpnOutcome out, and the core every transport shares
  'router', // ipnRouter() and its transports: node:http and Express, fetch, Fastify
  'admin', // the operator's page (ipn-kit/admin)
  'testing', // the fake payment service
  'cli', // the ipn-kit command
];

/** Packages the library never loads itself: the user's database clients and frameworks. */
const DRIVERS_AND_FRAMEWORKS =
  'node_modules/(pg|mysql2|ioredis|redis|@redis|prom-client|express|fastify|next|react|hono|@hono|@nestjs|@prisma|drizzle-orm|kysely|knex|typeorm|sequelize|better-sqlite3)/';

const above = (layer) => LAYERS.slice(LAYERS.indexOf(layer) + 1);

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'An import cycle: move the shared piece down a layer.',
      from: {},
      to: { circular: true },
    },
    ...LAYERS.filter((layer) => above(layer).length > 0).map((layer) => ({
      name: `${layer}-imports-downward`,
      severity: 'error',
      comment: `lib/${layer}/ may import only the folders below it (${LAYERS.slice(0, LAYERS.indexOf(layer)).join(', ') || 'none'}).`,
      from: { path: `^lib/${layer}/` },
      to: { path: `^lib/(${above(layer).join('|')})/` },
    })),
    {
      name: 'entry-points-on-top',
      severity: 'error',
      comment: 'The public entry points (lib/*.ts) re-export; nothing inside lib/ imports them.',
      from: { path: '^lib/[^/]+/' },
      to: { path: '^lib/[^/]+\\.ts$' },
    },
    {
      name: 'no-driver-in-core',
      severity: 'error',
      comment:
        "The library takes the user's client (only the CLI opens its own): it never loads a database driver, a framework or prom-client. The Fastify adapter imports Fastify's types only (the packaging test loads ipn-kit/fastify with no Fastify installed).",
      from: {
        path: '^lib/',
        pathNot: '^lib/(cli/|observability/register-ipn-metrics\\.ts$|router/fastify-plugin\\.ts$)',
      },
      to: { path: DRIVERS_AND_FRAMEWORKS },
    },
    {
      name: 'not-to-unresolvable',
      severity: 'error',
      from: { path: '^lib/' },
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
