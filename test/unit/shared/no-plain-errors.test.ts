import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

// "Every error ipn-kit creates extends IpnKitError" (docs/errors.md): a `new Error(` in lib/ is either one
// that never reaches a user (only ever the cause of an IpnKitError, an abort reason, caught and turned into
// a fallback) or a bug. Each one allowed is listed here with the reason it cannot reach a user: a new one
// fails this test until it is an IpnKitError subclass or has its reason written down. TypeError and
// RangeError, thrown at once for a programmer's mistake (a wrong option or argument), are documented as such
// and are not `new Error(`.

const root = join(__dirname, '..', '..', '..');

/** Each allowed `new Error(`: its file, a piece of its line, and why no user ever sees it as it is. */
const ALLOWED: ReadonlyArray<{ file: string; line: string; reason: string }> = [
  {
    file: 'lib/delivery/unexpected.ts',
    line: '() => new Error(late)',
    reason:
      "caught right there (recheck): a status query late past storeTimeoutMs is an unconfirmed copy, its words in the rejected event's detail",
  },
  {
    file: 'lib/delivery/lifecycle.ts',
    line: 'new Error(`no answer within ${ms} ms`)',
    reason: "caught in statusNow: only its message goes into the conflict event's words",
  },
  {
    file: 'lib/delivery/accounts.ts',
    line: "new Error('late')",
    reason: 'caught right there: an expectation read that is late names no account, and each key is asked',
  },
  {
    file: 'lib/cli/cli-inbox-mysql.ts',
    line: "new Error('the mysql2/promise module has no createPool')",
    reason: 'the CLI prints only its message ("could not load the mysql2 package: ...") and exits 1',
  },
  {
    file: 'lib/stores/orm/prisma.ts',
    line: 'const pgError = new Error(',
    reason:
      "Prisma's failed raw query reshaped as pg throws it (PostgreSQL's code): only ever read by the store, which wraps it in a StoreError or a DeliveryError as its cause",
  },
  {
    file: 'lib/delivery/store-claimer.ts',
    line: 'new Error(`no answer within ${timeoutMs} ms`)',
    reason: 'a claim that timed out: only ever the cause of the StoreError the claim resolves with',
  },
  {
    file: 'lib/delivery/store-claimer.ts',
    line: 'new Error(String(value))',
    reason:
      'a non-Error a store rejected with: only ever the cause of the StoreError the claim resolves with',
  },
  {
    file: 'lib/notification/custom-data.ts',
    line: "new Error('it is asynchronous;",
    reason: 'an asynchronous schema: only ever the cause of the CustomDataError attached to the notification',
  },
  {
    file: 'lib/body/read-body.ts',
    line: 'new Error(messageOf(cause))',
    reason: 'a throw inside a stream callback: the cause of the IPN_INTERNAL error the core reports (a 500)',
  },
  {
    file: 'lib/cli/cli-inbox.ts',
    line: "new Error('the pg module has no Pool')",
    reason: 'the CLI prints only its message ("could not load the pg package: ...") and exits 1',
  },
  {
    file: 'lib/status/fleet-guard.ts',
    line: 'new Error(`no answer within ${shared.timeoutMs} ms`)',
    reason:
      "the shared guard's timeout: caught by call(), which falls back to the local budget with a warn line",
  },
  {
    file: 'lib/status/redis-guard.ts',
    line: 'unexpected reply to the budget script',
    reason: "an odd reply of the guard's script: caught by the fleet guard's call(), which falls back",
  },
  {
    file: 'lib/status/status-request.ts',
    line: 'new Error(`no complete answer within ${timeoutMs} ms (timeoutMs)`)',
    reason: 'an abort reason: the cause of the StatusQueryError the status query rejects with',
  },
  {
    file: 'lib/status/status-request.ts',
    line: "new Error('redirect refused')",
    reason: 'an abort reason: the query rejects with a StatusQueryError saying so',
  },
  {
    file: 'lib/status/status-request.ts',
    line: "new Error('answer too large')",
    reason: 'an abort reason: the query rejects with a StatusQueryError saying so',
  },
  {
    file: 'lib/testing/fake-provider-delivery.ts',
    line: 'new Error(`no answer within ${options.timeoutMs} ms`)',
    reason: "an abort reason of the fake service's own delivery: recorded as a failed delivery attempt",
  },
  {
    file: 'lib/testing/fake-provider-delivery.ts',
    line: "new Error('stopped')",
    reason: "an abort reason of the fake service's own delivery, once it is closed",
  },
];

/** Every `.ts` file under `dir`. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** Every `new Error(` in lib/, as `file:line: text`, with the allow-list entry that covers it (if any). */
function plainErrors() {
  return sources(join(root, 'lib')).flatMap((path) => {
    const file = relative(root, path).split('\\').join('/');
    return readFileSync(path, 'utf8')
      .split('\n')
      .flatMap((text, index) =>
        /\bnew Error\(/.test(text)
          ? [
              {
                where: `${file}:${index + 1}: ${text.trim()}`,
                allowed: ALLOWED.find((entry) => entry.file === file && text.includes(entry.line)),
              },
            ]
          : [],
      );
  });
}

test('no `new Error(` in lib/ outside the allow-list: an error a user can see is an IpnKitError', () => {
  const found = plainErrors();
  expect(found.length).toBeGreaterThan(0); // the scan reads the sources (a wrong root would pass vacuously)
  expect(found.filter(({ allowed }) => allowed === undefined).map(({ where }) => where)).toEqual([]);
});

test('every allow-list entry still matches a line (a fixed one is taken off the list)', () => {
  const used = new Set(plainErrors().map(({ allowed }) => allowed));
  expect(ALLOWED.filter((entry) => !used.has(entry)).map(({ file, line }) => `${file}: ${line}`)).toEqual([]);
});
