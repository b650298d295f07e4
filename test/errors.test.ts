/**
 * The library's one error constructor (lib/core/errors.ts): Node core's shape for
 * every errno code, the fields kept, the class chosen. Pure.
 */
import assert from 'node:assert/strict';
import { constants } from 'node:os';

import { invalidArgument, isSystemError, systemError, type ErrnoCode } from '../lib/core/errors';

describe('systemError (pure)', function () {
  it("gives every errno code of this platform its negative number, as Node core's errors carry it", function () {
    const codes = Object.keys(constants.errno) as ErrnoCode[];
    assert.ok(codes.length > 50);
    for (const code of codes) {
      const error = systemError(code, 'what happened');
      assert.ok(error instanceof Error);
      assert.ok(isSystemError(error), code);
      assert.equal(error.code, code);
      assert.equal(error.errno, -constants.errno[code], code);
      assert.equal(error.message, `${code}: what happened`);
    }
    assert.equal(systemError('ENODATA', 'x').errno, -61);
    assert.equal(systemError('EACCES', 'x').errno, -13);
  });

  it('keeps the fields given and makes the class asked for', function () {
    const error = systemError(
      'EACCES',
      'interface not managed',
      { interface: 'vx0', ifindex: 7, syscall: 'setlink', netns: 'n1' },
      TypeError,
    );
    assert.ok(error instanceof TypeError);
    assert.deepEqual(
      {
        interface: error.interface,
        ifindex: error.ifindex,
        syscall: error.syscall,
        netns: error.netns,
      },
      { interface: 'vx0', ifindex: 7, syscall: 'setlink', netns: 'n1' },
    );
    const invalid = invalidArgument('bad value', { interface: 'vx0' });
    assert.ok(invalid instanceof RangeError);
    assert.deepEqual([invalid.code, invalid.errno, invalid.syscall], ['EINVAL', -22, undefined]);
    assert.equal(invalid.message, 'EINVAL: bad value');
  });
});
