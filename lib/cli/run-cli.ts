import type { CliIo } from './cli-io.js';
import { inboxCommand } from './cli-inbox.js';
import { migrateCommand } from './cli-migrate.js';
import { sendCommand } from './cli-send.js';
import { packageVersion } from './package-version.js';

const USAGE = `usage:
  ipn-kit send <url> [--state SUCCESSFUL|FAILED] [--custom-data TEXT] [--transaction-id ID] [--amount N]
                     [--token SECRET] [--field NAME=VALUE]... [--repeat N] [--concurrent]
  ipn-kit inbox list [--status received|delivered|failed|dead] [--limit N]
  ipn-kit inbox show <key>
  ipn-kit inbox replay <key> | --dead
  ipn-kit inbox purge --before <ISO date> [--ttl-ms N] [--inside-dedupe-window] | --dead
  ipn-kit inbox audit
  (inbox: PostgreSQL at DATABASE_URL, or Redis with --redis-url URL [--prefix P])
  ipn-kit migrate [--table NAME] [--dry-run] [--mysql-url URL | --sqlite FILE]
  ipn-kit --version
Run 'ipn-kit <command> --help' for details.`;

/** Runs the CLI on `argv` (without `node` and the script) and resolves the exit code. */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const [command, ...rest] = argv;
  if (command === 'send') return sendCommand(rest, io);
  if (command === 'inbox') return inboxCommand(rest, io);
  if (command === 'migrate') return migrateCommand(rest, io);
  if (command === '--version' || command === '-v') {
    io.stdout(packageVersion());
    return 0;
  }
  if (command === undefined || command === '--help' || command === '-h') {
    io.stdout(USAGE);
    return command === undefined ? 2 : 0;
  }
  io.stderr(`ipn-kit: unknown command '${command}'\n${USAGE}`);
  return 2;
}
