// Run with: deno run --allow-net --allow-env=PORT deno.ts. Run by test/runtimes/deno.test.ts.
// #region deno
import { ipnRouter } from 'ipn-kit';

// Module scope: one router per process. In production give it a store every instance shares.
const ipn = ipnRouter();
Deno.serve({ port: Number(Deno.env.get('PORT') ?? 8000) }, (req) => ipn.fetch(req));
// #endregion deno

// Deno's global, as far as this file uses it: the project type-checks against Node's types, not Deno's.
declare const Deno: {
  env: { get(name: string): string | undefined };
  serve(options: { port: number }, handler: (req: Request) => Promise<Response>): unknown;
};
