import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { ipnRouter, MemoryStore } from 'ipn-kit';
import { registerIpnMetrics } from 'ipn-kit/prometheus';
import { calls, ipn } from '../../examples/snippets/context.js';
import { quiet } from '../helpers/quiet-logger.js';

// The "Operating it" page: its snippets run, and the Prometheus rules and the Grafana dashboard it ships
// name only metrics that registerIpnMetrics() registers (a renamed metric would leave a rule silent forever).

const root = join(__dirname, '../..');
const read = (path: string) => readFileSync(join(root, path), 'utf8');

/** The metric names registerIpnMetrics registers on a router, at-least-once (the backlog gauge included). */
async function registered(): Promise<Set<string>> {
  const registry = new Registry();
  const router = ipnRouter({ store: new MemoryStore(), delivery: 'at-least-once', logger: quiet });
  registerIpnMetrics(router, { registry });
  const names = (await registry.getMetricsAsJSON()).map((metric) => metric.name);
  await router.close();
  return new Set(names);
}

const metricNames = (text: string) => [...new Set(text.match(/\bipn_kit_[a-z_]+/g) ?? [])];

test('every metric the alerting rules and the dashboard read is one registerIpnMetrics registers', async () => {
  const names = await registered();
  expect(names.has('ipn_kit_backlog_age_seconds')).toBe(true);
  const rules = metricNames(read('examples/prometheus/ipn-kit-alerts.yml'));
  const dashboard = metricNames(read('examples/grafana/ipn-kit-dashboard.json'));
  expect(rules.length).toBeGreaterThan(5);
  expect(rules.filter((name) => !names.has(name))).toEqual([]);
  expect(dashboard.filter((name) => !names.has(name))).toEqual([]);
});

test('the rules file has one alert per rule, each with an expr; the dashboard is JSON with its datasource input', () => {
  const rules = read('examples/prometheus/ipn-kit-alerts.yml');
  expect(rules.match(/^ {6}- alert: /gm)).toHaveLength(rules.match(/^ {8}expr: /gm)?.length ?? -1);
  const dashboard = JSON.parse(read('examples/grafana/ipn-kit-dashboard.json')) as {
    __inputs: Array<{ name: string }>;
    panels: Array<{ targets: Array<{ expr: string }> }>;
  };
  expect(dashboard.__inputs.map((input) => input.name)).toEqual(['DS_PROMETHEUS']);
  expect(dashboard.panels.every((panel) => panel.targets.length > 0)).toBe(true);
});

test('the alerts snippet adds its listeners, and its own one pages for dead and failing deliveries', async () => {
  const before = ipn.listenerCount('alert');
  await import('../../examples/snippets/alerts.js');
  expect(ipn.listenerCount('alert')).toBe(before + (process.env.SLACK_WEBHOOK_URL ? 3 : 2));
  const listeners = ipn.listeners('alert');
  const own = listeners[listeners.length - 1];
  calls.length = 0;
  const at = new Date('2026-11-28T03:00:00.000Z');
  own?.({
    kind: 'dead',
    state: 'firing',
    message: 'EFB.1:SUCCESSFUL is dead',
    since: at,
    at,
    count: 1,
    threshold: 1,
  });
  own?.({ kind: 'backlog', state: 'firing', message: 'old', since: at, at, count: 1, threshold: 1 });
  expect(calls.filter((call) => call[0] === 'logger.error').map((call) => call[2])).toEqual([
    'page the on-call: EFB.1:SUCCESSFUL is dead',
  ]);
  // alertLogger's listener: one error line for a firing alert.
  calls.length = 0;
  listeners[before]?.({
    kind: 'backlog',
    state: 'firing',
    message: 'old',
    since: at,
    at,
    count: 1,
    threshold: 1,
  });
  expect(calls.map((call) => call[2])).toEqual(['alert firing: backlog: old']);
});

test('the thresholds snippet builds a router', async () => {
  const { ipn: router } = await import('../../examples/snippets/alert-thresholds.js');
  expect(router.listenerCount('alert')).toBe(0);
  await router.close();
});
