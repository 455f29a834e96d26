import { execFile } from 'node:child_process';
import path from 'node:path';
import { runDemo, type DemoSummary } from '../../examples/demo.js';
import { PAYMENTS } from '../../examples/payment-service.js';
import { runServiceRules, type RulesSummary } from '../../examples/service-rules.js';

jest.setTimeout(30_000);

const root = path.resolve(__dirname, '../..');

describe('the demo (npm start)', () => {
  let summary: DemoSummary;
  beforeAll(async () => {
    summary = await runDemo();
  });

  const order = (orderId: string) => {
    const found = summary.orders.find((candidate) => candidate.orderId === orderId);
    if (!found) throw new Error(`the partner has no order ${orderId}`);
    return found;
  };

  it('plays about twenty payments with sequential and concurrent resends and a FAILED then SUCCESSFUL', () => {
    expect(PAYMENTS.length).toBeGreaterThanOrEqual(18);
    expect(PAYMENTS.some((p) => p.copies > 1 && !p.concurrent)).toBe(true);
    expect(PAYMENTS.some((p) => p.copies > 1 && p.concurrent)).toBe(true);
    expect(PAYMENTS.some((p) => p.states.join() === 'FAILED,SUCCESSFUL')).toBe(true);
  });

  it('credits every paid order exactly once, however many copies of its SUCCESSFUL arrived', () => {
    const paid = PAYMENTS.filter((p) => p.states.includes('SUCCESSFUL'));
    for (const payment of paid) {
      expect(order(payment.orderId)).toMatchObject({
        status: 'paid',
        credits: 1,
        transactionId: payment.transactionId,
      });
    }
  });

  it('marks orders whose only notification is FAILED as failed, with no credit', () => {
    const failed = PAYMENTS.filter((p) => !p.states.includes('SUCCESSFUL'));
    expect(failed.length).toBeGreaterThan(0);
    for (const payment of failed) {
      expect(order(payment.orderId)).toMatchObject({ status: 'failed', credits: 0 });
    }
  });

  it('ends a FAILED then SUCCESSFUL transaction paid with one credit', () => {
    const retried = PAYMENTS.find((p) => p.states.join() === 'FAILED,SUCCESSFUL');
    expect(order(retried?.orderId ?? '')).toMatchObject({ status: 'paid', credits: 1 });
  });

  it('counts each resend as a duplicate, each verified notification once, and the malformed request as invalid', () => {
    const resends = PAYMENTS.reduce((sum, p) => sum + p.states.length * (p.copies - 1), 0);
    const notifications = PAYMENTS.reduce((sum, p) => sum + p.states.length, 0);
    const reversed = PAYMENTS.filter((p) => p.states.length > 1).length;
    expect(summary.service).toMatchObject({ notifications, resends, malformedStatus: 400 });
    expect(summary.counts).toEqual({
      received: notifications - reversed,
      duplicates: resends,
      invalid: 1,
      rejected: reversed + 1,
    });
    expect(summary.review).toEqual([]);
  });

  it('rejects the forged SUCCESSFUL: answered 200, the order stays failed, nothing credited', () => {
    expect(summary.service.forgedStatus).toBe(200);
    expect(order(summary.service.forgedOrderId)).toMatchObject({ status: 'failed', credits: 0 });
  });

  it('verifies with at most one status query per transaction, however many copies arrived', () => {
    // Plus one for the forged id (a not-found is believed once the service repeats it), and one for each
    // transaction notified in two states, whose second may need an answer newer than the first one's.
    const reversed = PAYMENTS.filter((p) => p.states.length > 1).length;
    expect(summary.statusQueries).toBeLessThanOrEqual(PAYMENTS.length + 2 + reversed);
  });

  it('runs as `npm start`: exits 0 and prints the orders and the counts', async () => {
    const { code, stdout, stderr } = await new Promise<{
      code: number | null;
      stdout: string;
      stderr: string;
    }>((resolve) => {
      const tsx = path.join(root, 'node_modules', '.bin', 'tsx');
      const child = execFile(tsx, ['examples/demo.ts'], { cwd: root }, (_error, stdout, stderr) =>
        resolve({ code: child.exitCode, stdout, stderr }),
      );
    });
    expect(code).toBe(0);
    // The default logger is loud: the three requests the demo stages to be refused are warned about, no more.
    const warnings = stderr.trimEnd().split('\n').sort();
    expect(warnings).toEqual([
      expect.stringMatching(/^\[ipn-kit\] WARN rejected an IPN request: malformed_body /),
      expect.stringMatching(/^\[ipn-kit\] WARN the notification of \S+ differs from the service's record /),
      expect.stringMatching(/^\[ipn-kit\] WARN the payment service does not know transaction \S+: /),
    ]);
    expect(stdout).toMatch(/^order-1001\s+5,000\s+paid\s+1\s+EFB\.001158/m);
    expect(stdout).toMatch(/^order-1008\s+4,000\s+paid\s+1\s+PIX_22827811/m);
    expect(stdout).toMatch(new RegExp(`^Received\\s+${summary.counts.received}\\b`, 'm'));
    expect(stdout).toMatch(new RegExp(`^Duplicates\\s+${summary.counts.duplicates}\\b`, 'm'));
    expect(stdout).toMatch(/^Invalid\s+1\b/m);
    expect(stdout).toMatch(/^Rejected\s+2\b/m);
    expect(stdout).toMatch(
      /^order-2001\s+1000\s+SUCCESS notification\s+1\s+credited \(state received: SUCCESS\)$/m,
    );
    expect(stdout).toMatch(/^Rejected by their expectation: 1, with 0 status queries$/m);
    expect(stdout).toMatch(/^order-2003\s+3000\s+notification lost\s+1\s+credited by the sweep/m);
  });
});

describe("the demo's second scene: the service's own rules", () => {
  let rules: RulesSummary;
  beforeAll(async () => {
    rules = await runServiceRules();
  });
  const order = (orderId: string) => rules.orders.find((candidate) => candidate.orderId === orderId);

  it('credits a SUCCESS notification (written with reponse) once', () => {
    expect(order('order-2001')).toMatchObject({ credits: 1, outcome: 'credited (state received: SUCCESS)' });
  });

  it('rejects the forged copy by its expectation, with no status query', () => {
    expect(rules.rejected).toBe(1);
    expect(rules.queriesBeforeSweep).toBe(0);
    expect(order('order-2002')?.credits).toBe(1); // the genuine payment, from the sweep
  });

  it('reconciles the lost notification through the sweep: one status query per missing notification', () => {
    expect(order('order-2003')).toMatchObject({
      credits: 1,
      outcome: 'credited by the sweep (status query)',
    });
    expect(rules.reconciled).toBe(2);
    expect(rules.statusQueries).toBe(2);
  });
});
