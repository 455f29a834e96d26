/**
 * Type tests, checked by `npm run typecheck` (tsc --noEmit), never run. Each @ts-expect-error line must be
 * an error: if the types loosen, tsc fails on the unused directive.
 */
import { createServer } from 'node:http';
import express5 from 'express';
import express4 from 'express4';
import { z } from 'zod';
import * as zm from 'zod/mini';
import { Client, Pool, type PoolClient } from 'pg';
import { ipnRouter, MemoryStore, type IpnNotification, type Store } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import type { IpnPluginOptions } from '../../lib/fastify.js';

const ipn = ipnRouter({ customData: z.object({ orderId: z.string() }) });

// Mounts in Express 5, Express 4 and plain node:http.
express5().use('/ipn', ipn);
express4().use('/ipn', ipn);
express5().post('/ipn', ipn);
createServer(ipn);

ipn.on('successful', (n) => {
  const state: 'SUCCESSFUL' = n.state;
  const amount: number | null = n.amount;
  const raw: string = n.custom_data;
  const extra: unknown = n.extra.currency;
  if (n.customDataError) {
    const code: string = n.customDataError.code;
    // @ts-expect-error customData is undefined when customDataError is set
    void n.customData.orderId;
    return void code;
  }
  const orderId: string = n.customData.orderId;
  // @ts-expect-error customData follows the schema
  void n.customData.missing.field;
  // @ts-expect-error amount is a number or null, not a string
  const wrong: string = n.amount;
  void [state, amount, raw, extra, orderId, wrong];
});

ipn.on('failed', (n) => {
  // @ts-expect-error a failed notification is never SUCCESSFUL
  const state: 'SUCCESSFUL' = n.state;
  const error: string = n.error;
  void [state, error];
});

ipn.on('notification', (n) => {
  // @ts-expect-error any state reaches 'notification': it is a string, not only the final states
  const state: 'SUCCESSFUL' | 'FAILED' = n.state;
  void state;
});

ipn.on('duplicate', (n: IpnNotification) => void n.transaction_id);
ipn.on('invalid', (event) => {
  const status: number = event.status;
  const reason:
    | 'malformed_body'
    | 'not_an_object'
    | 'invalid_fields'
    | 'body_too_large'
    | 'unsupported_media_type'
    | 'unauthorized'
    | 'request_aborted' = event.reason;
  void [status, reason];
});
ipn.on('error', ({ error }) => void error.code);
ipn.on('successful', async () => {}).on('failed', () => {});

// @ts-expect-error no such event
ipn.on('paid', () => {});
// @ts-expect-error no such event
ipn.prependListener('success', () => {});
ipn.prependOnceListener('successful', (n) => void n.amount);
// @ts-expect-error the payload of 'invalid' is not a notification
ipn.on('invalid', (n: IpnNotification) => void n);

// Without a customData schema there is no customData field.
const plain = ipnRouter();
plain.on('successful', (n) => {
  // @ts-expect-error customData exists only with a schema
  void n.customData.orderId;
});

// Options are checked.
// @ts-expect-error ttlMs is a number of milliseconds
ipnRouter({ ttlMs: '7d' });
// @ts-expect-error so is its deprecated name, ttl
ipnRouter({ ttl: '7d' });
// @ts-expect-error storeTimeoutMs is a number of milliseconds
ipnRouter({ storeTimeoutMs: '5s' });
// @ts-expect-error a store needs claim and release
ipnRouter({ store: { claim: () => true } });
ipnRouter({ store: new MemoryStore({ maxEntries: 10 }), limit: '1mb', ttlMs: 1000, storeTimeoutMs: 100 });
// The deprecated names still compile (struck through in editors) until the next minor version.
ipnRouter({ ttl: 1000, storeTimeout: 100, verifyTimeout: 30_000 });
const asyncStore: Store = { claim: () => Promise.resolve(true), release: () => Promise.resolve() };
ipnRouter({ store: asyncStore });

// zod/mini schemas are zod 4 schemas too.
const mini = ipnRouter({ customData: zm.object({ orderId: zm.string() }) });
mini.on('successful', (n) => {
  if (n.customDataError) return;
  const orderId: string = n.customData.orderId;
  void orderId;
});

// Every listener of a notification gets the attempt's context; only PostgresStore at least once has a `db`,
// typed as the client your pool hands out.
plain.on('successful', (n, context) => {
  const key: string = context.key;
  const attempt: number = context.attempt;
  // @ts-expect-error no db with the memory store
  void context.db.query('SELECT 1');
  void [key, attempt];
});
const pool = new Pool();
const transactional = ipnRouter({ store: new PostgresStore({ pool }), delivery: 'at-least-once' });
transactional.on('successful', async (n, { db, attempt }) => {
  const client: PoolClient = db;
  await db.query('UPDATE orders SET paid_at = now() WHERE id = $1', [n.custom_data]);
  void [client, attempt];
});
transactional.on('notification', (n, { db }) => void db.query('SELECT 1'));
transactional.on('failed', (n, { db }) => void db.query('SELECT 1'));
// At most once, the same store opens no transaction: no db.
const atMostOnce = ipnRouter({ store: new PostgresStore({ pool }) });
// @ts-expect-error no db at most once
atMostOnce.on('successful', (n, { db }) => void db.query('SELECT 1'));
// Over a single Client (no connect() handing out clients), no db either.
const single = ipnRouter({ store: new PostgresStore({ pool: new Client() }), delivery: 'at-least-once' });
// @ts-expect-error no db over a single Client
single.on('successful', (n, { db }) => void db.query('SELECT 1'));
// A transactional router is a router like any other: the Fastify plugin and ipn.fetch take it as it is.
const transactionalPlugin: IpnPluginOptions = { router: transactional };
const transactionalFetch: Promise<Response> = transactional.fetch(new Request('https://shop.example/ipn'));
void [transactionalPlugin, transactionalFetch];

// The service's rules: rawState, stale, expect, authenticate.
ipn.on('successful', (n) => {
  const received: string | undefined = n.rawState;
  return void received;
});
ipn.on('stale', (event) => {
  const reason: 'not_final' | 'not_found' | 'unavailable' | 'no_status_client' = event.reason;
  const at: Date = event.expectedAt;
  return void [reason, at];
});
void ipn.expect('EFB.001158', { amount: 5000, customData: { orderId: 'order-1' } });
// @ts-expect-error amount is a number
void ipn.expect('EFB.001158', { amount: '5000' });
ipnRouter({ authenticate: ({ rawBody, headers, token }) => rawBody !== undefined && !!headers.x && !!token });
// @ts-expect-error authenticate answers a boolean
ipnRouter({ authenticate: () => 'yes' });

// The Web-standard handler: a Request in, a Response out; any platform's waitUntil fits.
const handled: Promise<Response> = ipnRouter().fetch(new Request('https://shop.example/ipn'), {
  waitUntil: (promise: Promise<unknown>) => void promise,
});
void handled;
// @ts-expect-error a Request, not a URL string
void ipnRouter().fetch('https://shop.example/ipn');
// @ts-expect-error waitUntil takes a promise
void ipnRouter().fetch(new Request('https://shop.example/ipn'), { waitUntil: (ms: number) => ms });

// The Fastify plugin takes the router itself.
const pluginOptions: IpnPluginOptions = { router: ipnRouter() };
void pluginOptions;
// @ts-expect-error router is required
const noRouter: IpnPluginOptions = {};
void noRouter;
