import { ipnRouter } from '../../../lib/index.js';
import { resolveOptions } from '../../../lib/config/options.js';
import { quiet } from '../../helpers/quiet-logger.js';

describe('the alerts option', () => {
  test('every threshold has its documented default; one given keeps the others', () => {
    expect(resolveOptions({}).alerts).toEqual({
      failuresInARow: 10,
      failureRatio: 0.5,
      failureRatioMinAttempts: 20,
      failureWindowMs: 300_000,
      backlogAgeMs: 300_000,
      forgedBurst: 5,
      forgedWindowMs: 60_000,
      quietMs: 300_000,
    });
    expect(resolveOptions({ alerts: { failuresInARow: 3, quietMs: undefined } }).alerts).toMatchObject({
      failuresInARow: 3,
      quietMs: 300_000,
    });
  });

  test.each([
    [{ failuresInARows: 3 }, /unknown alerts option failuresInARows \(known: failuresInARow, /],
    [{ failuresInARow: 0 }, /alerts\.failuresInARow must be a positive integer, got 0/],
    [{ forgedBurst: 1.5 }, /alerts\.forgedBurst must be a positive integer/],
    [{ failureRatio: 0 }, /alerts\.failureRatio must be a number above 0, at most 1, got 0/],
    [{ failureRatio: 1.5 }, /alerts\.failureRatio/],
    [{ backlogAgeMs: -1 }, /alerts\.backlogAgeMs must be a positive number of milliseconds/],
    [{ quietMs: 2 ** 31 }, /alerts\.quietMs must be at most/],
  ])('refuses %p at construction', (alerts, message) => {
    expect(() => ipnRouter({ logger: quiet, alerts: alerts as never })).toThrow(message);
  });

  test('refuses a value that is not an object', () => {
    expect(() => ipnRouter({ logger: quiet, alerts: 5 as never })).toThrow(
      new TypeError('ipnRouter: alerts must be an object of thresholds, got number'),
    );
  });
});
