import type { Logger } from '../../lib/index.js';

/** A logger that says nothing: tests assert on events, and expected failures would clutter the output. */
export const quiet: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };
