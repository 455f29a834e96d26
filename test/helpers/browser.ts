import { existsSync } from 'node:fs';

/**
 * The Chromium the browser suites drive with playwright-core: `CHROMIUM_PATH`, or Debian's `chromium`
 * (`apt-get install chromium`; `.ci/run` installs it). playwright-core never downloads a browser of its own.
 */
export function chromiumPath(): string | undefined {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'];
  return candidates.find(
    (path): path is string => typeof path === 'string' && path !== '' && existsSync(path),
  );
}

/** The flags Chromium needs here: root in a sandbox-less container, and no network of its own. */
export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * `describe(name, fn)` when Chromium is installed. Otherwise: under `CI=true`, throws (the file fails); else
 * warns why and declares the suite with `describe.skip`, as the Redis and PostgreSQL suites do.
 */
export function describeWithBrowser(name: string, fn: (executablePath: string) => void): void {
  const path = chromiumPath();
  if (path !== undefined) {
    // A hang guard, not a speed target: Chromium's first page on two loaded cores can take longer than
    // jest's default 5 s (seen in a full run with other suites busy).
    jest.setTimeout(30_000);
    describe(name, () => fn(path));
    return;
  }
  const why = 'Chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)';
  if (process.env.CI === 'true')
    throw new Error(`${why}: CI=true, so "${name}" fails instead of being skipped`);
  console.warn(`${why}: skipping "${name}".`);
  describe.skip(name, () => fn(''));
}
