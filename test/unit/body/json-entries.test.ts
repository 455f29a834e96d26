import { jsonEntries, repeatedJsonKeys } from '../../../lib/body/json-entries.js';

const KEYS = ['transaction_id', 'state', 'custom_data'];

describe('jsonEntries', () => {
  it('lists the outermost keys with the exact source text of each value, nested objects skipped', () => {
    const text = '{ "a" : 12.30 , "b":{"a":[1,{"c":"}"}]}, "c" :"x\\"}y", "d":12345678901234567891 }';
    expect(jsonEntries(text)).toEqual([
      { key: 'a', value: '12.30' },
      { key: 'b', value: '{"a":[1,{"c":"}"}]}' },
      { key: 'c', value: '"x\\"}y"' },
      { key: 'd', value: '12345678901234567891' },
    ]);
  });

  it('decodes keys spelled with escapes', () => {
    expect(jsonEntries('{"st\\u0061te":"FAILED"}')).toEqual([{ key: 'state', value: '"FAILED"' }]);
  });

  it('takes tabs, carriage returns and newlines around the colon as whitespace', () => {
    expect(jsonEntries('{"a"\t:\t1,"b"\r\n:\r\n2}')).toEqual([
      { key: 'a', value: '1' },
      { key: 'b', value: '2' },
    ]);
  });

  it('finds a key however much whitespace stands before its colon', () => {
    const text = `{"state"${'\n'.repeat(500)}:"FAILED","state":"SUCCESSFUL"}`;
    expect(jsonEntries(text).map(({ key }) => key)).toEqual(['state', 'state']);
  });
});

describe('repeatedJsonKeys', () => {
  it.each([
    ['plainly', '{"state":"FAILED","state":"SUCCESSFUL"}'],
    ['with whitespace before the colon', `{"state"${' '.repeat(64)}:"FAILED","state":"SUCCESSFUL"}`],
    ['spelled with an escape', '{"state":"FAILED","st\\u0061te":"SUCCESSFUL"}'],
  ])('finds a key repeated %s', (_case, text) => {
    expect(repeatedJsonKeys(text, KEYS)).toEqual(['state']);
  });

  it.each([
    ['in nested objects only', '{"state":"FAILED","meta":{"state":1,"x":{"state":2}}}'],
    ['as a value', '{"state":"FAILED","response":"state","note":"\\"state\\""}'],
    ['in strings holding braces and quotes', '{"state":"FAILED","a":"{\\"state\\":1}","b":"\\\\"}'],
  ])('ignores the key name appearing %s', (_case, text) => {
    expect(repeatedJsonKeys(text, KEYS)).toEqual([]);
  });
});
