import { readFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';

/** What the figures were measured on: they mean little without it. */
export interface Machine {
  os: string;
  cpuModel: string;
  cpuCount: number;
  memoryGiB: number;
  node: string;
  /** When the run ended, ISO 8601. */
  date: string;
  /** 1, 5 and 15 min load averages at the start and at the end of the run: other work skews every figure. */
  loadAverage: { start: string; end: string };
  /** The versions of the services used (Redis, PostgreSQL). */
  services: string[];
  /** The versions of the packages that take part in the measurement. */
  packages: Record<string, string>;
}

const PACKAGES = ['express', 'autocannon', 'ioredis', 'pg', 'zod'];

const loadAverage = (): string =>
  os
    .loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');

/** The 1-minute load average when this module was loaded (at the start of the run). */
export const LOAD_AT_START = os.loadavg()[0] ?? 0;
const loadAtStart = loadAverage();

function versionOf(name: string): string {
  try {
    const text = readFileSync(join(__dirname, '..', 'node_modules', name, 'package.json'), 'utf8');
    return (JSON.parse(text) as { version: string }).version;
  } catch {
    return '?';
  }
}

/** Describes this machine now, with the versions of `services`. */
export function describeMachine(services: string[]): Machine {
  const cpus = os.cpus();
  return {
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    cpuModel: cpus[0]?.model.trim() ?? '?',
    cpuCount: cpus.length,
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    date: new Date().toISOString(),
    loadAverage: { start: loadAtStart, end: loadAverage() },
    services,
    packages: Object.fromEntries(PACKAGES.map((name) => [name, versionOf(name)])),
  };
}
