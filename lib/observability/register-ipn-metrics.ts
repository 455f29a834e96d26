import { Counter, Gauge, register as defaultRegistry, type Registry } from 'prom-client';
import type { IpnMetrics } from './metrics.js';

/**
 * Options of {@link registerIpnMetrics}.
 * @inline
 */
export interface PrometheusOptions {
  /** Where the metrics are registered. @default prom-client's default registry */
  registry: Registry;
  /** Prepended to every metric name. @default 'ipn_kit_' */
  prefix: string;
}

/** One exported counter: its name after the prefix, its help, and how to read it (by label). */
const COUNTERS: Array<[string, string, (m: IpnMetrics) => Record<string, number>]> = [
  [
    'notifications_received_total',
    'Valid notifications received, resends included',
    (m) => ({ '': m.received }),
  ],
  ['duplicates_total', 'Resends dropped', (m) => ({ '': m.duplicates })],
  ['invalid_total', 'Requests rejected (400, 401, 413, 415)', (m) => ({ '': m.invalid })],
  ['emitted_total', 'Notifications emitted, by state', (m) => m.emitted],
  [
    'rejected_total',
    'Notifications the status query or an expectation contradicted',
    (m) => ({ '': m.rejected }),
  ],
  [
    'unknown_states_total',
    'First deliveries in a state neither final nor a known spelling of one',
    (m) => ({ '': m.unknownStates }),
  ],
  ['stale_total', 'Expected transactions the sweep could not reconcile', (m) => ({ '': m.stale })],
  [
    'conflicts_total',
    "FAILED notifications after their transaction's accepted SUCCESSFUL (the conflict event)",
    (m) => ({ '': m.conflicts }),
  ],
  [
    'errors_total',
    'Failures reported through the error event, by kind',
    (m) => ({
      listener: m.listenerErrors,
      store: m.storeErrors,
      verification: m.verificationErrors,
      verification_shed: m.verificationsShed,
    }),
  ],
  ['delivery_attempts_total', 'At-least-once delivery attempts', (m) => ({ '': m.deliveryAttempts })],
  ['dead_total', 'At-least-once notifications marked dead', (m) => ({ '': m.dead })],
  [
    'status_queries_total',
    'Status queries of the verify client, by outcome',
    (m): Record<string, number> => ({ ...m.statusQueries }),
  ],
];

const LABELS: Record<string, string> = {
  emitted_total: 'state',
  errors_total: 'kind',
  status_queries_total: 'outcome',
};

/** The symbol a router answers to by reading its backlog's age at each recovery pass (see `ipn-router.ts`). */
const WATCH_BACKLOG = Symbol.for('ipn-kit.watchBacklog');

/**
 * Registers a router's counters as Prometheus counters, read from `ipn.metrics()` at each scrape, and the
 * gauge `backlog_age_seconds` (at least once: the age of the oldest notification not delivered yet, read
 * from the inbox at each recovery pass; absent at most once and before the first read), and the gauge
 * `paused` (1 while `ipn.pause()` holds delivery, as this instance last read it, 0 otherwise).
 *
 * @example
 * import { register } from 'prom-client';
 * import { registerIpnMetrics } from 'ipn-kit/prometheus';
 *
 * registerIpnMetrics(ipn);
 * app.get('/metrics', async (_req, res) => {
 *   res.type(register.contentType).send(await register.metrics());
 * });
 */
export function registerIpnMetrics(
  source: { metrics(): IpnMetrics },
  options: Partial<PrometheusOptions> = {},
): void {
  if (typeof source?.metrics !== 'function') {
    throw new TypeError('registerIpnMetrics: pass the router (anything with a metrics() method)');
  }
  const registry = options.registry ?? defaultRegistry;
  const prefix = options.prefix ?? 'ipn_kit_';
  for (const [name, help, read] of COUNTERS) {
    const label = LABELS[name];
    // Counters only go up; each scrape adds what the router counted since the previous one.
    const seen = new Map<string, number>();
    new Counter({
      name: prefix + name,
      help,
      labelNames: label ? [label] : [],
      registers: [registry],
      collect() {
        for (const [value, total] of Object.entries(read(source.metrics()))) {
          const delta = total - (seen.get(value) ?? 0);
          if (delta <= 0) continue;
          seen.set(value, total);
          if (label) this.inc({ [label]: value }, delta);
          else this.inc(delta);
        }
      },
    });
  }
  (source as { [WATCH_BACKLOG]?: () => void })[WATCH_BACKLOG]?.();
  new Gauge({
    name: `${prefix}backlog_age_seconds`,
    help: 'At least once: age of the oldest notification not delivered yet, as of the last inbox read',
    registers: [registry],
    collect() {
      const age = source.metrics().backlogAgeMs;
      if (age === undefined) this.reset();
      else this.set(age / 1000);
    },
  });
  // A router's inbox says whether `ipn.pause()` holds delivery on this instance; another source has none.
  const inbox = (source as { inbox?: { isPaused?: () => boolean } }).inbox;
  new Gauge({
    name: `${prefix}paused`,
    help: 'At least once: 1 while ipn.pause() holds delivery (as this instance last read it), 0 otherwise',
    registers: [registry],
    collect() {
      this.set(inbox?.isPaused?.() === true ? 1 : 0);
    },
  });
}
