// `npm run test:fast`: the contributor's loop. Type-aware eslint is the longest step by far, so it runs in
// one lane while the other lane runs prettier, dependency-cruiser, tsc and the unit tests: on two cores the
// whole loop takes about as long as eslint alone. Each lane's output is printed when the lane ends, so the
// two never interleave; the exit code is the first failure's.
import { spawn } from 'node:child_process';
import generatePrismaClients from './prisma-generate.mjs';

const CACHE = 'node_modules/.cache/ipn-kit';
const lanes = [
  [['eslint', '--cache', '--cache-location', `${CACHE}/eslint`, '.']],
  [
    ['prettier', '--check', '--cache', '--log-level', 'warn', '.'],
    ['depcruise', 'lib', '--config', '.dependency-cruiser.cjs'],
    ['tsc', '-p', 'tsconfig.json', '--incremental', '--tsBuildInfoFile', `${CACHE}/tsconfig.tsbuildinfo`],
    ['jest', 'test/unit'],
  ],
];

/** Runs one command through npx, its output collected; resolves its exit code. */
function run([command, ...args], output) {
  return new Promise((resolve) => {
    output.push(`> ${command} ${args.join(' ')}\n`);
    const child = spawn('npx', ['--no-install', command, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (chunk) => output.push(chunk));
    child.stderr.on('data', (chunk) => output.push(chunk));
    child.on('error', (error) => {
      output.push(`${command}: ${error.message}\n`);
      resolve(1);
    });
    child.on('close', (code) => resolve(code ?? 1));
  });
}

/** Runs a lane's commands one after another, stopping at the first failure. */
async function lane(commands) {
  const output = [];
  let code = 0;
  for (const command of commands) {
    code = await run(command, output);
    if (code !== 0) break;
  }
  for (const part of output) process.stdout.write(part);
  return code;
}

// eslint and tsc both read the types of the generated Prisma clients: they are made first (or kept).
generatePrismaClients();
const codes = await Promise.all(lanes.map(lane));
process.exitCode = codes.find((code) => code !== 0) ?? 0;
