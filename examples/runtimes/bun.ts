// Run with: bun run bun.ts (ipn-kit installed with npm or bun install). Run by test/runtimes/bun.test.ts.
// #region bun
import { ipnRouter } from 'ipn-kit';

// Module scope: one router per process. In production give it a store every instance shares.
const ipn = ipnRouter();
const server = Bun.serve({ fetch: (req) => ipn.fetch(req) }); // listens on $PORT, else 3000
console.log(`listening on ${server.url.href}`);
// #endregion bun

// Bun's global, as far as this file uses it: the project type-checks against Node's types, not Bun's.
declare const Bun: {
  serve(options: { fetch(req: Request): Promise<Response> }): { url: URL };
};
