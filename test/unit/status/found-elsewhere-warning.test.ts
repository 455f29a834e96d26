import { createFoundElsewhereWarning } from '../../../lib/status/found-elsewhere-warning.js';

function setup() {
  let clock = 5_000_000;
  const lines: Array<{ fields: Record<string, unknown>; message: string }> = [];
  const logger = {
    debug: () => {},
    info: () => {},
    error: () => {},
    warn: (fields: unknown, message?: string) =>
      void lines.push({ fields: fields as Record<string, unknown>, message: String(message) }),
  };
  const warn = createFoundElsewhereWarning(logger, { everyMs: 60_000, now: () => clock });
  return { warn, lines, advance: (ms: number) => (clock += ms) };
}

describe('createFoundElsewhereWarning', () => {
  test('the first find under another account is said at once, with what to fix; the next ones are held back', () => {
    const { warn, lines } = setup();
    for (let i = 0; i < 50; i += 1) warn(`ID.${i}`, 'zoneA', 'zoneB');
    expect(lines).toHaveLength(1);
    expect(lines[0]?.message).toMatch(
      /transaction ID\.0 was found under account zoneB, not under zoneA, the account named for it/,
    );
    expect(lines[0]?.message).toMatch(/name account zoneB for such transactions/);
    expect(lines[0]?.fields).toMatchObject({
      transaction_id: 'ID.0',
      account: 'zoneB',
      named: 'zoneA',
      count: 1,
    });
  });

  test('once the interval is over, one summary line says how many there were since the last line', () => {
    const { warn, lines, advance } = setup();
    warn('ID.0', 'zoneA', 'zoneB');
    for (let i = 1; i < 10; i += 1) warn(`ID.${i}`, 'zoneA', 'zoneB');
    advance(60_000);
    warn('ID.10', 'zoneA', 'zoneB');
    expect(lines).toHaveLength(2);
    expect(lines[1]?.message).toMatch(
      /^10 transaction\(s\) named account zoneA were found under account zoneB since the last such line \(the latest: ID\.10\)/,
    );
    expect(lines[1]?.message).toMatch(/name account zoneB for such transactions/);
    expect(lines[1]?.fields).toMatchObject({ count: 10, named: 'zoneA', account: 'zoneB' });
  });

  test('each pair of accounts (named, found) has its own first line', () => {
    const { warn, lines } = setup();
    warn('ID.1', 'zoneA', 'zoneB');
    warn('ID.2', 'zoneB', 'zoneA');
    warn('ID.3', 'zoneA', 'zoneC');
    warn('ID.4', 'zoneA', 'zoneB');
    expect(lines.map((line) => [line.fields.named, line.fields.account])).toEqual([
      ['zoneA', 'zoneB'],
      ['zoneB', 'zoneA'],
      ['zoneA', 'zoneC'],
    ]);
  });
});
