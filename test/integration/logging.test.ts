import request from 'supertest';
import { ipnRouter } from '../../lib/index.js';
import { successfulPayload, uniquePayload } from '../helpers/payloads.js';
import { listen, type Running } from '../helpers/servers.js';
import express from 'express';

describe('logging', () => {
  let running: Running;
  afterEach(() => running.close());

  test("ipn-kit's log lines never carry the customer's number or name", async () => {
    const lines: string[] = [];
    const record = (level: string) => (object: object, message: string) =>
      void lines.push(`${level} ${message} ${JSON.stringify(object)}`);
    const logger = {
      debug: record('debug'),
      info: record('info'),
      warn: record('warn'),
      error: record('error'),
    };
    const ipn = ipnRouter({ logger });
    ipn.on('successful', () => {
      throw new Error('ledger down');
    });
    const app = express();
    app.use('/ipn', ipn);
    running = await listen(app);
    const post = (body: string) =>
      request(running.url).post('/ipn').set('Content-Type', 'application/json').send(body);
    const payload = uniquePayload();

    await post(JSON.stringify(payload)); // accepted, listener fails
    await post(JSON.stringify(payload)); // duplicate
    await post(JSON.stringify(successfulPayload({ transaction_id: 'bad id' }))); // invalid fields
    await post(JSON.stringify(payload).slice(0, -8)); // malformed
    await post('{"customer_name":"Awa Kone" "destination":"0700000001"}'); // V8's syntax error quotes this body

    expect(lines.map((line) => line.split(' ')[0])).toEqual([
      'debug',
      'error',
      'debug',
      'warn',
      'warn',
      'warn',
    ]);
    for (const line of lines) {
      expect(line).not.toContain('0700000001');
      expect(line).not.toContain('Awa Kone');
    }
    expect(lines[1]).toContain(String(payload.transaction_id));
  });
});
