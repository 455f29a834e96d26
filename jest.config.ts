import type { Config } from 'jest';

const config: Config = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: '<rootDir>/tsconfig.json' }] },
  moduleNameMapper: {
    // Sources import './x.js' (what Node ESM needs); jest resolves the .ts beside it.
    '^(\\.{1,2}/.*)\\.js$': '$1',
    '^ipn-kit$': '<rootDir>/lib/index.ts',
    '^ipn-kit/(.*)$': '<rootDir>/lib/$1.ts',
  },
  // The packaging test builds and installs the tarball; it runs as its own step of `npm test`.
  testPathIgnorePatterns: ['/node_modules/', '/test/packaging/'],
  // The Prisma clients the Prisma tests import are generated, once, before any test file loads.
  globalSetup: '<rootDir>/test/prisma-generate.mjs',
};

export default config;
