import { randomInt } from 'node:crypto';
import { parseArgs } from 'node:util';
import type { CliIo } from './cli-io.js';
import { postJson, type PostResult } from '../testing/fake-provider-delivery.js';
import { httpUrl } from '../testing/fake-provider-initiate.js';
import { ipnForm, newTransaction } from '../testing/fake-provider-record.js';
import type { FinalState } from '../notification/schema.js';
import { ipnUrl, TOKEN_PARAMETER } from '../authenticate/ipn-url.js';

const USAGE = `usage: ipn-kit send <url> [--state SUCCESSFUL|FAILED] [--custom-data TEXT] [--transaction-id ID]
                     [--amount N] [--token SECRET] [--field NAME=VALUE]... [--repeat N] [--concurrent]

POSTs a notification shaped like the payment service's own to <url>, and prints each answer.
  --state           final state notified: SUCCESSFUL (default) or FAILED
  --custom-data     the custom_data echoed back to you (default: empty)
  --transaction-id  the transaction id (default: a fresh one, such as CLI.482913377)
  --amount          the amount (default: 5000)
  --token, --secret the router's secret: sent as the address's ?token=, as ipnUrl() builds it (default: none)
  --field           set any field of the body, NAME=VALUE, repeatable: VALUE is JSON when it parses
                    as JSON (42, null, "7"), else the text itself (--field currency=XOF)
  --repeat          send the same notification N times, as the service's resends (default: 1)
  --concurrent      send the N copies all at once instead of one after another
Redirects are not followed (a 3xx is not delivered); at most 64 KiB of each answer is read.
Exit code: 0 when every answer is 2xx, 1 otherwise, 2 for a usage error.`;

const TIMEOUT_MS = 10_000;

/** What `ipn-kit send` was asked to do. */
interface SendPlan {
  url: string;
  state: FinalState;
  customData: string;
  transactionId: string;
  amount: number;
  repeat: number;
  concurrent: boolean;
  /** Fields set with `--field`, in order, over the built notification. */
  fields: Array<[name: string, value: unknown]>;
}

/** A mistake in the command line: reported with the usage, exit code 2. */
class UsageError extends Error {}

/**
 * `ipn-kit send <url>`: POSTs a realistic notification (the fake provider's builder) to `url`, `--repeat` times,
 * one after another or `--concurrent`ly. Prints one line per request and a summary; resolves the exit code:
 * 0 when every answer is 2xx, 1 otherwise, 2 for a usage error.
 */
export async function sendCommand(argv: string[], io: CliIo): Promise<number> {
  let plan: SendPlan | 'help';
  try {
    plan = readPlan(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.stderr(`ipn-kit send: ${error.message}\n${USAGE}`);
    return 2;
  }
  if (plan === 'help') {
    io.stdout(USAGE);
    return 0;
  }
  const transaction = newTransaction({ ...plan, outcome: plan.state, state: plan.state });
  const form = ipnForm(transaction);
  // defineProperty, not assignment: `--field __proto__=...` sends a field, it does not set a prototype.
  for (const [name, value] of plan.fields)
    Object.defineProperty(form, name, { value, enumerable: true, writable: true, configurable: true });
  const body = JSON.stringify(form);
  const mode = plan.concurrent ? 'all at once' : 'one after another';
  const times = plan.repeat === 1 ? 'once' : `${plan.repeat} times, ${mode}`;
  const shown = (name: string) => (typeof form[name] === 'string' ? form[name] : JSON.stringify(form[name]));
  io.stdout(
    `POST ${redactToken(plan.url)}: ${shown('transaction_id')} ${shown('state')} amount ${shown('amount')}, ${times}`,
  );

  const send = () => postJson(plan.url, body, { timeoutMs: TIMEOUT_MS });
  const results: PostResult[] = [];
  if (plan.concurrent) {
    results.push(...(await Promise.all(Array.from({ length: plan.repeat }, send))));
    results.forEach((result, index) => io.stdout(line(index, result)));
  } else {
    for (let index = 0; index < plan.repeat; index += 1) {
      const result = await send();
      results.push(result);
      io.stdout(line(index, result));
    }
  }
  const ok = results.filter(({ status }) => status >= 200 && status < 300).length;
  const failed = results.length - ok;
  io.stdout(`${results.length} sent: ${ok} answered 2xx, ${failed} did not`);
  return failed === 0 ? 0 : 1;
}

/**
 * `#1 200 {"ok":true}`, `#1 301 a redirect to ..., not followed: nothing was delivered`, or
 * `#1 error: connect ECONNREFUSED ...` when no answer came.
 */
function line(index: number, result: PostResult): string {
  if (result.status === 0) return `#${index + 1} error: ${result.error ?? 'no answer'}`;
  if (result.error !== undefined) return `#${index + 1} ${result.status} ${result.error}`;
  const body = result.body.replace(/\s+/g, ' ').trim();
  const shown = body.length > 200 || result.truncated === true ? `${body.slice(0, 200)}...` : body;
  return `#${index + 1} ${result.status} ${shown}`;
}

function readPlan(argv: string[]): SendPlan | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        state: { type: 'string' },
        'custom-data': { type: 'string' },
        'transaction-id': { type: 'string' },
        amount: { type: 'string' },
        repeat: { type: 'string' },
        concurrent: { type: 'boolean' },
        token: { type: 'string' },
        secret: { type: 'string' },
        field: { type: 'string', multiple: true },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    // parseArgs throws a TypeError with a clear message ("Unknown option '--bogus'...").
    const { message } = error as { message?: unknown };
    throw new UsageError(typeof message === 'string' ? message : String(error));
  }
  const { values, positionals } = parsed;
  if (values.help === true) return 'help';
  if (positionals.length === 0) throw new UsageError('the <url> to send to is missing');
  if (positionals.length > 1) throw new UsageError(`one <url> only, got ${positionals.join(' ')}`);
  let url: string;
  try {
    url = httpUrl('send', positionals[0]);
  } catch {
    throw new UsageError(
      `<url> must be an http(s) URL such as http://127.0.0.1:3000/ipn, got '${positionals[0]}'`,
    );
  }
  const state = values.state ?? 'SUCCESSFUL';
  if (state !== 'SUCCESSFUL' && state !== 'FAILED') {
    throw new UsageError(`--state must be SUCCESSFUL or FAILED, got '${state}'`);
  }
  const transactionId = values['transaction-id'] ?? `CLI.${randomInt(100_000_000, 1_000_000_000)}`;
  if (!/^[A-Za-z0-9][A-Za-z0-9._:-]*$/.test(transactionId)) {
    throw new UsageError(`--transaction-id must be a token such as EFB.001158, got '${transactionId}'`);
  }
  const amount = number('--amount', values.amount ?? '5000');
  if (!(amount > 0)) throw new UsageError(`--amount must be a number above 0, got '${values.amount}'`);
  const repeat = number('--repeat', values.repeat ?? '1');
  if (!Number.isInteger(repeat) || repeat < 1 || repeat > 1000) {
    throw new UsageError(`--repeat must be a whole number from 1 to 1000, got '${values.repeat}'`);
  }
  const { token, secret } = values;
  if (token !== undefined && secret !== undefined && token !== secret) {
    throw new UsageError('--token and --secret are the same thing: give one of them');
  }
  const shared = token ?? secret;
  if (shared !== undefined) {
    if (shared.length === 0) throw new UsageError('--token must not be empty');
    url = ipnUrl(url, { secret: shared });
  }
  return {
    url,
    state,
    customData: values['custom-data'] ?? '',
    transactionId,
    amount,
    repeat,
    concurrent: values.concurrent === true,
    fields: (values.field ?? []).map(readField),
  };
}

/** `NAME=VALUE` as a field: the value as JSON when it parses as JSON, else the text itself. */
function readField(text: string): [string, unknown] {
  const at = text.indexOf('=');
  const name = at === -1 ? '' : text.slice(0, at);
  if (name.trim() === '') {
    throw new UsageError(`--field must be NAME=VALUE, such as --field currency=XOF, got '${text}'`);
  }
  const raw = text.slice(at + 1);
  try {
    return [name, JSON.parse(raw) as unknown];
  } catch {
    return [name, raw];
  }
}

/** The URL as printed: the token is a credential, kept out of the terminal's scrollback. */
function redactToken(url: string): string {
  const parsed = new URL(url);
  if (!parsed.searchParams.has(TOKEN_PARAMETER)) return url;
  parsed.searchParams.set(TOKEN_PARAMETER, '***');
  return parsed.toString().replace('%2A%2A%2A', '***');
}

function number(flag: string, text: string): number {
  if (!/^\d+(?:\.\d+)?$/.test(text.trim())) throw new UsageError(`${flag} must be a number, got '${text}'`);
  return Number(text);
}
