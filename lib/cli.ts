#!/usr/bin/env node
/// <reference types="node" preserve="true" />
/**
 * The `ipn-kit` command (`npx ipn-kit send|inbox ...`): the package's `bin`, a script that exports nothing. The
 * commands live in `cli/`.
 * @packageDocumentation
 */
import type { CliIo } from './cli/cli-io.js';
import { runCli } from './cli/run-cli.js';

if (typeof require !== 'undefined' && require.main === module) {
  const io: CliIo = {
    stdout: (line) => process.stdout.write(`${line}\n`),
    stderr: (line) => process.stderr.write(`${line}\n`),
    env: process.env,
  };
  runCli(process.argv.slice(2), io).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      io.stderr(`ipn-kit: ${error instanceof Error ? error.message : String(error)}`);
      process.exitCode = 1;
    },
  );
}
