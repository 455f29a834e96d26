/**
 * `ipn-kit/prometheus`: a router's counters as Prometheus metrics, through your own `prom-client` (a peer
 * dependency of this entry point only: `ipn-kit` alone never loads it).
 * @packageDocumentation
 */
export { registerIpnMetrics } from './observability/register-ipn-metrics.js';
