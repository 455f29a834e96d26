import { main } from '../../examples/multi-instance.js';
import { describeWithService } from '../helpers/services.js';

jest.setTimeout(30_000);

describeWithService('Redis', 'examples/multi-instance.ts (Redis part)', () => {
  describeWithService('PostgreSQL', 'and PostgreSQL part', () => {
    test('copies spread over two instances credit the payment once in total, with each store', async () => {
      expect(await main()).toEqual({ redisCredits: 1, postgresCredits: 1 });
    });
  });
});
