import { ipn, logger } from './context.js';
// #region alerts
import { alertLogger, alertWebhook } from 'ipn-kit';

// One log line when a condition starts (error) and one when it ends (warn).
ipn.on('alert', alertLogger(logger));

// A Slack (or Teams) incoming webhook: one message per start and end, never one per notification.
const slack = process.env.SLACK_WEBHOOK_URL;
if (slack) ipn.on('alert', alertWebhook({ url: slack }));

// Or your own: page someone for money stuck, post the rest.
ipn.on('alert', (alert) => {
  if (alert.state === 'firing' && (alert.kind === 'dead' || alert.kind === 'deliveries_failing')) {
    logger.error({ alert: alert.kind, since: alert.since }, `page the on-call: ${alert.message}`);
  }
});
// #endregion alerts
