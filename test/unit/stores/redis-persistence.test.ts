import { persistenceWarning, saveOf } from '../../../lib/stores/redis/redis-persistence.js';

const INFO = (aof: number) =>
  `# Persistence\r\nloading:0\r\nrdb_changes_since_last_save:0\r\naof_enabled:${aof}\r\naof_rewrite_in_progress:0\r\n`;

describe('persistenceWarning', () => {
  test('no AOF and no RDB save point: a warning that names what a restart loses and the fix', () => {
    const warning = persistenceWarning(INFO(0), '');
    expect(warning).toContain('restart loses the whole inbox');
    expect(warning).toContain('appendonly yes');
  });

  test('AOF on, or RDB save points, or save points not known (CONFIG refused): nothing', () => {
    expect(persistenceWarning(INFO(1), '')).toBeUndefined();
    expect(persistenceWarning(INFO(0), '3600 1 300 100 60 10000')).toBeUndefined();
    expect(persistenceWarning(INFO(0), undefined)).toBeUndefined();
    expect(persistenceWarning('ERR unknown section', '')).toBeUndefined();
  });
});

describe('saveOf', () => {
  test('reads the RESP2 array, the RESP3 map and an object; anything else is not known', () => {
    expect(saveOf(['save', ''])).toBe('');
    expect(saveOf(new Map([['save', '3600 1']]))).toBe('3600 1');
    expect(saveOf({ save: '' })).toBe('');
    expect(saveOf([])).toBeUndefined();
    expect(saveOf(null)).toBeUndefined();
  });
});
