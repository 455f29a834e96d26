import { redactText } from './redact.js';

/**
 * OpenTelemetry traces (see docs/operating.md, "Traces"): a span per request, per delivery attempt and per
 * status query, made only when the app has registered a tracer provider. `@opentelemetry/api` is an
 * optional peer: it is never imported at module load. Before each span, one read of the API's global
 * registry says whether a tracer provider is registered; only then is the API loaded (once, from where
 * ipn-kit is installed) and asked for the provider's tracer. With none registered, nothing is loaded and
 * nothing is made. The few parts of the API used here are typed structurally below, so that neither the
 * build nor a user's typecheck needs the package.
 */

/** A span's identity, as `@opentelemetry/api` shapes it. */
interface SpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
}

type AttributeValue = string | number | boolean;
type Attributes = Record<string, AttributeValue | undefined>;

interface Span {
  spanContext(): SpanContext;
  setAttribute(key: string, value: AttributeValue): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  end(): void;
}

/** An OpenTelemetry context: immutable, keyed by symbols. */
interface Context {
  getValue(key: symbol): unknown;
  setValue(key: symbol, value: unknown): Context;
}

interface Tracer {
  startSpan(
    name: string,
    options?: { kind?: number; attributes?: Attributes; links?: { context: SpanContext }[] },
    context?: Context,
  ): Span;
}

/** The parts of `@opentelemetry/api` used here. */
interface OtelApi {
  trace: {
    getTracerProvider(): { getDelegateTracer?(name: string, version?: string): Tracer | undefined };
    setSpan(context: Context, span: Span): Context;
    getSpan(context: Context): Span | undefined;
  };
  context: {
    active(): Context;
    with<T>(context: Context, run: () => T): T;
  };
}

/** `SpanKind` and `SpanStatusCode` of the API (stable numbers of the OpenTelemetry specification). */
const INTERNAL = 0;
const SERVER = 1;
const CLIENT = 2;
const CONSUMER = 4;
const ERROR = 2;

/** Where every copy of `@opentelemetry/api` 1.x keeps what the app registered (its `registerGlobal`). */
const REGISTRY = Symbol.for('opentelemetry.js.api.1');
const TRACER_NAME = 'ipn-kit';

/** The API, once loaded: `null` when it could not be (not installed where ipn-kit can load it). */
let loaded: OtelApi | null | undefined;

function load(): OtelApi | null {
  try {
    // The CommonJS build has its module's own `require`; the ES module build, one resolving from the app's
    // folder, when the runtime has `node:module` (a runtime without it gets no traces).
    const from =
      typeof require === 'function'
        ? require
        : process.getBuiltinModule?.('node:module')?.createRequire(`${process.cwd()}/`);
    // A name in a variable: a bundler must not try to bundle this optional peer.
    const name = '@opentelemetry/api';
    return (from?.(name) as OtelApi | undefined) ?? null;
  } catch {
    return null;
  }
}

/**
 * The API and the registered provider's tracer, or `undefined` when no tracer provider is registered (or
 * the API cannot be loaded): the one check on the request path when tracing is off, a property read.
 */
function tracing(): { api: OtelApi; tracer: Tracer } | undefined {
  const registry = (globalThis as { [REGISTRY]?: { trace?: unknown } })[REGISTRY];
  if (registry?.trace === undefined) return undefined;
  loaded ??= load();
  if (loaded === null) return undefined;
  // The provider the API hands out is a proxy; its delegate is the app's provider, if one is set.
  const tracer = loaded.trace.getTracerProvider().getDelegateTracer?.(TRACER_NAME);
  return tracer === undefined ? undefined : { api: loaded, tracer };
}

/** Whether spans are made now (a tracer provider is registered). */
export function tracingActive(): boolean {
  return tracing() !== undefined;
}

/** The W3C `traceparent` of a span (`00-<trace id>-<span id>-<flags>`). */
function traceparentOf(span: Span): string {
  const { traceId, spanId, traceFlags } = span.spanContext();
  return `00-${traceId}-${spanId}-${(traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The span context a `traceparent` names, for a link; `undefined` when it is not one. */
function linkedContext(traceparent: unknown): SpanContext | undefined {
  if (typeof traceparent !== 'string') return undefined;
  const match = TRACEPARENT.exec(traceparent);
  if (match === null) return undefined;
  return { traceId: match[1]!, spanId: match[2]!, traceFlags: parseInt(match[3]!, 16), isRemote: true };
}

/** What a span is about: the notification's identity, never the customer's name or number. */
export interface Identified {
  readonly transaction_id: string;
  readonly state: string;
}

/**
 * The span of one request: started as a child of the active span (the HTTP server span, when the app's
 * instrumentation made one). Its context is the parent of the first delivery attempt, and its `traceparent`
 * is kept with the inbox entry, for the attempts taken up later to link to.
 */
export interface RequestSpan {
  /** The request span's `traceparent`, kept with the inbox entry. */
  readonly traceparent: string;
  /** Runs `run` with the request span active (a status query made meanwhile is its child). */
  within<T>(run: () => T): T;
  /** Names the notification the request carried, once it is valid. */
  identify(notification: Identified, key: string): void;
  /** Ends the span with the answer's status and what it came to (`accepted`, `duplicate`, a reason). */
  end(status: number, outcome: string): void;
  /** The span's context, the parent of the first delivery attempt. */
  readonly parent: Parent;
}

/** Where a delivery attempt's span belongs: the request's own span (in this process), or a link to it. */
export type Parent = { readonly context: unknown } | { readonly traceparent: unknown };

/** Starts a request's span, or `undefined` (nothing made) when no tracer provider is registered. */
export function startRequestSpan(): RequestSpan | undefined {
  const on = tracing();
  if (on === undefined) return undefined;
  const { api, tracer } = on;
  const active = api.context.active();
  // Under the HTTP server span of the app's instrumentation, an internal span: two server spans never nest.
  const kind = api.trace.getSpan(active) === undefined ? SERVER : INTERNAL;
  const span = tracer.startSpan('ipn.request', { kind }, active);
  const context = api.trace.setSpan(active, span);
  return {
    traceparent: traceparentOf(span),
    within: (run) => api.context.with(context, run),
    identify: (n, key) => {
      span.setAttribute('ipn.transaction_id', n.transaction_id);
      span.setAttribute('ipn.state', n.state);
      span.setAttribute('ipn.delivery_key', key);
    },
    end: (status, outcome) => {
      span.setAttribute('http.response.status_code', status);
      span.setAttribute('ipn.outcome', outcome);
      if (status >= 500) span.setStatus({ code: ERROR, message: outcome });
      span.end();
    },
    parent: { context },
  };
}

/** One delivery attempt's span: told how the attempt ended, then ended. */
export interface AttemptSpan {
  /** Ends the span: `outcome` (`delivered`, `retried`, `dead`, ...), and why it failed, if it did. */
  end(outcome: string, failure?: string): void;
}

/**
 * Runs one delivery attempt at `n` in a span of its own, `ipn.deliver`: a child of the request's span when
 * the request was handled in this process just before (`parent.context`), else of the active span (a
 * `drain()` called in a span of the app's), linked to the request's span through the `traceparent` kept
 * with the entry. The listeners run with it active (their own spans are its children). With no tracer
 * provider registered, runs `attempt` as it is.
 */
export function traceAttempt<T>(
  n: Identified,
  key: string,
  attempt: number,
  parent: Parent | undefined,
  run: (span: AttemptSpan | undefined) => Promise<T>,
): Promise<T> {
  const on = tracing();
  if (on === undefined) return run(undefined);
  const { api, tracer } = on;
  const inProcess = parent !== undefined && 'context' in parent ? (parent.context as Context) : undefined;
  const linked =
    parent !== undefined && 'traceparent' in parent ? linkedContext(parent.traceparent) : undefined;
  const attributes: Attributes = {
    'ipn.transaction_id': n.transaction_id,
    'ipn.state': n.state,
    'ipn.delivery_key': key,
    'ipn.attempt': attempt,
  };
  const span = tracer.startSpan(
    'ipn.deliver',
    { kind: CONSUMER, attributes, ...(linked ? { links: [{ context: linked }] } : {}) },
    inProcess ?? api.context.active(),
  );
  const context = api.trace.setSpan(inProcess ?? api.context.active(), span);
  let ended = false;
  const handle: AttemptSpan = {
    end: (outcome, failure) => {
      if (ended) return;
      ended = true;
      span.setAttribute('ipn.outcome', outcome);
      // The message is the attempt's failure, whose listener texts may quote the customer: scrubbed.
      if (failure !== undefined) span.setStatus({ code: ERROR, message: redactText(failure, n) });
      span.end();
    },
  };
  return api.context.with(context, () => run(handle)).finally(() => handle.end('other'));
}

/**
 * Runs one status query about `transactionId` in a span, `ipn.status_query` (a child of the active span:
 * the request's or the delivery attempt's), which names the state answered or the error's kind. With no
 * tracer provider registered, runs `query` as it is.
 */
export function traceStatusQuery<R extends { state?: unknown }>(
  transactionId: string,
  query: () => Promise<R>,
): Promise<R> {
  const on = tracing();
  if (on === undefined) return query();
  const { api, tracer } = on;
  const active = api.context.active();
  const attributes = { 'ipn.transaction_id': transactionId };
  const span = tracer.startSpan('ipn.status_query', { kind: CLIENT, attributes }, active);
  const settled = api.context.with(api.trace.setSpan(active, span), () => Promise.resolve().then(query));
  return settled.then(
    (record) => {
      if (typeof record?.state === 'string') span.setAttribute('ipn.state', record.state);
      span.setAttribute('ipn.outcome', 'answered');
      span.end();
      return record;
    },
    (error: unknown) => {
      // The error's kind only: a message may quote what the service answered.
      const kind = errorKind(error);
      span.setAttribute('ipn.outcome', 'failed');
      span.setAttribute('error.type', kind);
      span.setStatus({ code: ERROR, message: kind });
      span.end();
      throw error;
    },
  );
}

function errorKind(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string') return code;
  return error instanceof Error ? error.name : 'error';
}

/**
 * The field of an inbox entry's record that keeps the request span's `traceparent` (added only while
 * traces are on), so that an attempt taken up later, even by another process after a restart, links to
 * the request. Kept in the record, not a column of its own: every store keeps it with no change of schema.
 */
export const TRACEPARENT_FIELD = 'ipn_kit_traceparent';

/**
 * `n` without a field of that name among its `extra` fields: the service never sends one, so a sender's own
 * is dropped on arrival. Only the request's span is then kept with the entry and linked to, and listeners
 * never see the field, at the first attempt as at the later ones.
 */
export function withoutSentTraceparent<N extends { readonly extra: Record<string, unknown> }>(n: N): N {
  if (!Object.hasOwn(n.extra, TRACEPARENT_FIELD)) return n;
  const { [TRACEPARENT_FIELD]: _sent, ...extra } = n.extra;
  return { ...n, extra };
}

/** `record`, keeping `traceparent` (when there is one) with it. */
export function keepTraceparent(
  record: Record<string, unknown>,
  traceparent: string | undefined,
): Record<string, unknown> {
  return traceparent === undefined ? record : { ...record, [TRACEPARENT_FIELD]: traceparent };
}

/** A stored record without the kept `traceparent`, and the parent it names for an attempt's span. */
export function takeTraceparent(record: Record<string, unknown>): {
  record: Record<string, unknown>;
  parent: Parent | undefined;
} {
  if (!Object.hasOwn(record, TRACEPARENT_FIELD)) return { record, parent: undefined };
  const { [TRACEPARENT_FIELD]: traceparent, ...rest } = record;
  return { record: rest, parent: { traceparent } };
}
