import { alertLogger, alertWebhook, ipnRouter, MemoryStore, type AlertEvent } from 'ipn-kit';
import { formatAlert } from '../../lib/observability/alert-notifiers.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { until } from '../helpers/until.js';
import { webhookReceiver } from '../helpers/webhook-receiver.js';

const serve = servedRouters();

const alert = (overrides: Partial<AlertEvent> = {}): AlertEvent => ({
  kind: 'dead',
  state: 'firing',
  message: 'EFB.1:SUCCESSFUL is dead after 8 attempts',
  since: new Date('2026-11-28T03:00:00.000Z'),
  at: new Date('2026-11-28T03:00:00.000Z'),
  count: 1,
  threshold: 1,
  ...overrides,
});

/** A logger that keeps its warnings. */
function warnings() {
  const lines: Array<[Record<string, unknown>, string]> = [];
  return {
    lines,
    logger: { ...quiet, warn: (o: Record<string, unknown>, m: string) => void lines.push([o, m]) },
  };
}

describe('alertWebhook against a local stand-in for Slack', () => {
  test('POSTs each alert as { text }, one line Slack and Teams show as it is', async () => {
    const slack = await webhookReceiver();
    try {
      const notify = alertWebhook({ url: slack.url });
      notify(alert());
      notify(
        alert({ state: 'resolved', at: new Date('2026-11-28T03:02:00.000Z'), message: 'no dead entry' }),
      );
      await notify.idle();
      expect(slack.received).toEqual([
        {
          text: '[ipn-kit] FIRING dead: EFB.1:SUCCESSFUL is dead after 8 attempts (since 2026-11-28T03:00:00.000Z)',
        },
        { text: '[ipn-kit] RESOLVED dead: no dead entry (lasted 120 s, since 2026-11-28T03:00:00.000Z)' },
      ]);
    } finally {
      await slack.close();
    }
  });

  test('a custom body is sent as given', async () => {
    const slack = await webhookReceiver();
    try {
      const notify = alertWebhook({ url: slack.url, body: (e) => ({ kind: e.kind, state: e.state }) });
      notify(alert());
      await notify.idle();
      expect(slack.received).toEqual([{ kind: 'dead', state: 'firing' }]);
    } finally {
      await slack.close();
    }
  });

  test.each(['hang', 'fail'] as const)(
    'an endpoint that %ss leaves the router unaffected: notifications answered and delivered, a warning without the URL',
    async (mode) => {
      const slack = await webhookReceiver(mode);
      try {
        const { lines, logger } = warnings();
        const notify = alertWebhook({ url: slack.url, timeoutMs: 200, maxQueue: 2, logger });
        const ipn = ipnRouter({
          store: new MemoryStore(),
          delivery: 'at-least-once',
          logger: quiet,
          retryDelayMs: 1,
          recoveryIntervalMs: 20,
          alerts: { failuresInARow: 1, quietMs: 60_000 },
        });
        let failing = true;
        const credited: string[] = [];
        ipn.on('successful', (n) => {
          if (failing) throw new Error('ledger down');
          credited.push(n.transaction_id);
        });
        const told: AlertEvent[] = [];
        ipn.on('alert', notify);
        ipn.on('alert', (e) => void told.push(e));
        const errors: unknown[] = [];
        ipn.on('error', (e) => void errors.push(e.error));
        const { post } = await serve(ipn);

        // Fires at the first failure; the POST hangs (or fails) while the router goes on.
        const first = uniquePayload();
        expect((await post(first)).status).toBe(200);
        await until(() => told.length === 1, 'the firing alert');
        failing = false;
        await until(() => credited.length === 1, 'the retry delivered');
        const second = uniquePayload();
        expect((await post(second)).status).toBe(200);
        await until(() => credited.length === 2, 'the next one delivered');
        expect(credited).toEqual([first.transaction_id, second.transaction_id]);
        expect(told.map((e) => e.state)).toEqual(['firing', 'resolved']);

        await notify.idle(); // every POST given up within timeoutMs (or answered 500)
        // One POST at a time, none retried: at most the two alerts (a loaded machine may abort one mid-body).
        expect(slack.received.length).toBeLessThanOrEqual(2);
        expect(errors.every((e) => (e as Error).message.includes('ledger down'))).toBe(true);
        expect(lines.length).toBeGreaterThanOrEqual(1);
        expect(lines[0]?.[1]).toMatch(
          mode === 'hang'
            ? /^alertWebhook: 1 alert\(s\) not sent to 127\.0\.0\.1:\d+: no answer within 200 ms \(timeoutMs\)$/
            : /^alertWebhook: 1 alert\(s\) not sent to 127\.0\.0\.1:\d+: the endpoint answered 500$/,
        );
        expect(JSON.stringify(lines)).not.toContain('secret');
      } finally {
        await slack.close();
      }
    },
    20_000,
  );

  test('bounded: past maxQueue an alert is dropped and counted, one POST at a time, none retried', async () => {
    const slack = await webhookReceiver('hang');
    try {
      const { lines, logger } = warnings();
      const notify = alertWebhook({ url: slack.url, timeoutMs: 300, maxQueue: 2, logger });
      for (let i = 0; i < 10; i += 1) notify(alert({ message: `alert ${i}` }));
      await notify.idle();
      // The first in flight (it left the queue), two queued; the seven others dropped.
      expect(slack.received.map((b) => (b as { text: string }).text.match(/alert \d/)?.[0])).toEqual([
        'alert 0',
        'alert 1',
        'alert 2',
      ]);
      expect(lines[0]?.[1]).toMatch(/2 were waiting already \(maxQueue\): this one is dropped/);
    } finally {
      await slack.close();
    }
  });

  test('a body function that throws, or an unreachable endpoint, never throws into the caller', async () => {
    const { lines, logger } = warnings();
    const notify = alertWebhook({
      url: 'http://127.0.0.1:9/hook',
      logger,
      body: () => {
        throw new Error('bad body');
      },
    });
    expect(() => notify(alert())).not.toThrow();
    await expect(notify.idle()).resolves.toBeUndefined();
    expect(lines).toHaveLength(1);
  });

  test('refuses at construction an http: URL to another host, a bad queue bound or timeout, without quoting the URL', () => {
    expect(() => alertWebhook({ url: 'http://hooks.example.com/T0/B0/secret' })).toThrow(
      new TypeError('alertWebhook: url must be https: (or http: to loopback), got http:'),
    );
    expect(() => alertWebhook({ url: 'not a url secret' })).toThrow(/absolute URL/);
    expect(() => alertWebhook({ url: 'not a url secret' })).not.toThrow(/secret/);
    expect(() => alertWebhook({ url: 'https://hooks.example.com/x', maxQueue: 0 })).toThrow(/maxQueue/);
    expect(() => alertWebhook({ url: 'https://hooks.example.com/x', timeoutMs: -1 })).toThrow(/timeoutMs/);
  });
});

describe('alertLogger', () => {
  test('one error line when a condition fires, one warning when it resolves, with its fields', () => {
    const lines: Array<[string, Record<string, unknown>, string]> = [];
    const log = alertLogger({
      ...quiet,
      error: (o, m) => void lines.push(['error', o, m]),
      warn: (o, m) => void lines.push(['warn', o, m]),
    });
    log(alert({ key: 'EFB.1:SUCCESSFUL', lastError: 'boom' }));
    log(alert({ state: 'resolved', message: 'no dead entry', count: 2 }));
    expect(lines).toEqual([
      [
        'error',
        {
          alert: 'dead',
          state: 'firing',
          since: '2026-11-28T03:00:00.000Z',
          count: 1,
          threshold: 1,
          key: 'EFB.1:SUCCESSFUL',
          lastError: 'boom',
        },
        'alert firing: dead: EFB.1:SUCCESSFUL is dead after 8 attempts',
      ],
      [
        'warn',
        { alert: 'dead', state: 'resolved', since: '2026-11-28T03:00:00.000Z', count: 2, threshold: 1 },
        'alert resolved: dead: no dead entry',
      ],
    ]);
    expect(formatAlert(alert())).toContain('FIRING dead');
  });
});
