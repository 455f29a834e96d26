/// <reference types="node" preserve="true" />
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * The version of the installed ipn-kit: the `version` of the nearest `package.json` named `ipn-kit` above
 * this file (`dist/cjs/cli/` in the package, `lib/cli/` in the repository). `'unknown'` when none is found.
 */
export function packageVersion(from: string | undefined = moduleDirectory()): string {
  for (let directory = from; directory !== undefined;) {
    try {
      const manifest = JSON.parse(readFileSync(join(directory, 'package.json'), 'utf8')) as {
        name?: unknown;
        version?: unknown;
      };
      if (manifest.name === 'ipn-kit' && typeof manifest.version === 'string') return manifest.version;
    } catch {
      // No package.json here (or not JSON): look further up.
    }
    const parent = dirname(directory);
    directory = parent === directory ? undefined : parent;
  }
  return 'unknown';
}

/** This file's folder: `__dirname` in the CommonJS build (the `bin`), which is where the CLI runs. */
function moduleDirectory(): string | undefined {
  return typeof __dirname === 'string' ? __dirname : undefined;
}
