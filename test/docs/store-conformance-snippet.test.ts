import { describeWithService } from '../helpers/services.js';

// The snippet of "Writing your own store" is a test of its own (a partner's store, and the conformance test
// they run on it): loaded here, inside a suite that is skipped, saying why, when Redis is not running.
describeWithService('Redis', 'examples/snippets/store-conformance.ts', () => {
  jest.requireActual('../../examples/snippets/store-conformance.js');
});
