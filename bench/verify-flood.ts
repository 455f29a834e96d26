/**
 * How many forged notifications per second an app with `verify` and every default withstands (the status
 * client's budget of 30 queries a minute, maxPendingVerifications 500, limit 100 KB), and what it holds in
 * memory meanwhile. The app runs alone in a child process (test/processes/flood-app.ts, heap read after full
 * collections); this process posts forged notifications with unique ids as fast as the app answers them,
 * for DURATION_S seconds per body size, over CONCURRENCY keep-alive connections.
 *
 * Run: `npx tsx bench/verify-flood.ts` (not part of `npm run bench`).
 */
import { fork } from 'node:child_process';
import { Agent, request } from 'node:http';
import { join } from 'node:path';

const DURATION_S = Number(process.env.DURATION_S ?? 20);
const CONCURRENCY = 16;
const genuine = {
  transaction_id: 'EFB.000001',
  state: 'SUCCESSFUL',
  amount: 5000,
  custom_data: 'order-1',
  destination: '0700000000',
  customer_name: 'Customer',
};

const child = fork(join(__dirname, '..', 'test', 'processes', 'flood-app.ts'), [], {
  execArgv: ['--expose-gc', '--import', 'tsx'],
  env: { ...process.env, FLOOD: JSON.stringify({ genuine, serviceDelayMs: 0, defaults: true }) },
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
});
const ask = <T>(question: string): Promise<T> =>
  new Promise((resolve) => {
    const listener = (message: { type: string }) => {
      if (message.type !== question) return;
      child.off('message', listener);
      resolve(message as T);
    };
    child.on('message', listener);
    child.send(question);
  });
const heap = async () => (await ask<{ heapUsed: number }>('heap')).heapUsed;

function post(agent: Agent, port: number, body: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        agent,
        host: '127.0.0.1',
        port,
        path: '/',
        method: 'POST',
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function flood(port: number, bodyBytes: number, first: number): Promise<string> {
  const template = Buffer.from(
    JSON.stringify({ ...genuine, transaction_id: 'FRG.0000000', custom_data: 'x'.repeat(bodyBytes) }),
  );
  const at = template.indexOf('FRG.') + 4;
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const statuses: Record<number, number> = {};
  const before = await heap();
  const end = Date.now() + DURATION_S * 1000;
  let next = first;
  const worker = async () => {
    while (Date.now() < end) {
      const body = Buffer.from(template);
      body.write(String(next++).padStart(7, '0'), at, 'latin1');
      const status = await post(agent, port, body);
      statuses[status] = (statuses[status] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const growth = (await heap()) - before;
  agent.destroy();
  const total = Object.values(statuses).reduce((sum, count) => sum + count, 0);
  return (
    `${Math.round(bodyBytes / 1024)} KB bodies: ${total} forged posts in ${DURATION_S} s = ` +
    `${Math.round(total / DURATION_S)}/s, answers ${JSON.stringify(statuses)}, heap growth ` +
    `${Math.round(growth / 1024 / 1024)} MB`
  );
}

child.on('message', (message: { type: string; port?: number }) => {
  if (message.type !== 'ready' || message.port === undefined) return;
  const port = message.port;
  void (async () => {
    console.log(await flood(port, 90 * 1024, 0));
    console.log(await flood(port, 1024, 5_000_000));
    child.kill();
  })();
});
