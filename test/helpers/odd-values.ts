/** Values a listener may throw that are not Errors, or are Errors that fight being read. */
export function oddThrownValues(): Array<[name: string, value: unknown]> {
  const revoked = Proxy.revocable({}, {});
  revoked.revoke();
  return [
    ['a null-prototype object', Object.create(null)],
    ['a Symbol', Symbol('odd')],
    [
      'an object whose toString throws',
      {
        toString() {
          throw new Error('toString refused');
        },
      },
    ],
    [
      'an Error whose message getter throws',
      Object.defineProperty(new Error('hidden'), 'message', {
        get() {
          throw new Error('message getter refused');
        },
      }),
    ],
    ['an Error whose message is a number', Object.assign(new Error('x'), { message: 42 })],
    ['an object whose message is an object', { message: { nested: true } }],
    ['a revoked Proxy', revoked.proxy],
    ['undefined', undefined],
  ];
}
