import { createUnmatchedTokenWarning } from '../../../lib/observability/unmatched-token-warning.js';

function setup() {
  const warnings: Array<Record<string, unknown>> = [];
  const logger = {
    debug: () => {},
    info: () => {},
    warn: (object: Record<string, unknown>) => void warnings.push(object),
    error: () => {},
  };
  let clock = 1_000_000;
  const warning = createUnmatchedTokenWarning(logger, { everyMs: 60_000, now: () => clock });
  return { warning, warnings, advance: (ms: number) => (clock += ms) };
}

describe('createUnmatchedTokenWarning', () => {
  test('warns at the first refusal, then at most once every everyMs, counting every refusal', () => {
    const { warning, warnings, advance } = setup();

    warning.refused(true);
    advance(59_999);
    warning.refused(false);
    warning.refused(false);
    expect(warnings).toHaveLength(1);

    advance(1);
    warning.refused(true);
    expect(warnings).toEqual([
      { unauthorized: 1, withoutToken: 1, withOtherToken: 0 },
      { unauthorized: 4, withoutToken: 2, withOtherToken: 2 },
    ]);
  });

  test('never warns once a token has matched', () => {
    const { warning, warnings, advance } = setup();
    warning.matched();
    warning.refused(false);
    advance(3_600_000);
    warning.refused(true);
    expect(warnings).toEqual([]);
  });
});
