import { app, ipn } from './context.js';
// #region prometheus
import { register } from 'prom-client';
import { registerIpnMetrics } from 'ipn-kit/prometheus';

registerIpnMetrics(ipn); // options: { registry = prom-client's default, prefix = 'ipn_kit_' }
app.get('/metrics', async (_req, res) => void res.type(register.contentType).send(await register.metrics()));
// #endregion prometheus
