/**
 * The checks made before any system call (lib/core/validate.ts): MAC addresses (S1-S5), interface
 * names (E1), interface globs (S7) and namespace names, as tables, plus a seeded JS-side fuzz.
 * Pure: no kernel, no privileges.
 */
import assert from 'node:assert/strict';

import { readStatus, type StatusOptions } from '../lib/cli/status';
import { DEFAULT_OFFLOAD } from '../lib/core/defaults';
import { isSystemError, type SystemError } from '../lib/core/errors';
import {
  absolutePathOption,
  booleanOption,
  choiceOption,
  fixedOffloadPolicy,
  kernelFeatureNames,
  listOption,
  rejectUnknownOptions,
} from '../lib/core/options';
import { runDoctor, type DoctorOptions } from '../lib/doctor';
import { ensureVtep, type EnsureVtepOptions } from '../lib/ensure/ensure';
import {
  compileInterfaceGlob,
  macBytes,
  parseMac,
  resolveNetnsPath,
  validateInterfaceName,
} from '../lib/core/validate';
import { prng } from './support/prng';

/** Asserts that `operation` throws the EINVAL-shaped argument error; returns its message. */
function einval(operation: () => unknown, what: string): string {
  let caught: unknown;
  try {
    operation();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught !== undefined, `${what}: expected EINVAL, nothing was thrown`);
  assert.ok(caught instanceof RangeError, `${what}: expected a RangeError, got ${String(caught)}`);
  assert.ok(isSystemError(caught), `${what}: not a system error`);
  assert.equal(caught.code, 'EINVAL', what);
  assert.equal(caught.errno, -22, what);
  assert.equal(caught.syscall, undefined, `${what}: rejected before any system call`);
  assert.match(caught.message, /^EINVAL: /, what);
  return caught.message;
}

describe('validation before any system call (pure)', function () {
  describe('parseMac', function () {
    it('accepts unicast MACs and returns the canonical lower-case form (S4, S5)', function () {
      const table: [string, string][] = [
        ['02:00:00:00:00:01', '02:00:00:00:00:01'],
        ['0A:BB:CC:DD:EE:FF', '0a:bb:cc:dd:ee:ff'],
        ['0a:Bb:cC:dD:eE:fF', '0a:bb:cc:dd:ee:ff'],
        ['fe:ff:ff:ff:ff:ff', 'fe:ff:ff:ff:ff:ff'],
        // S5: globally administered (U/L bit clear) is accepted.
        ['00:11:22:33:44:55', '00:11:22:33:44:55'],
        ['00:00:00:00:00:01', '00:00:00:00:00:01'],
        ['d6:02:e3:df:ea:7a', 'd6:02:e3:df:ea:7a'],
      ];
      for (const [input, canonical] of table) {
        assert.equal(parseMac(input), canonical, input);
        assert.equal(parseMac(canonical), canonical, `${canonical} is a fixed point`);
        assert.deepEqual(
          [...macBytes(canonical)],
          canonical.split(':').map((o) => parseInt(o, 16)),
        );
      }
    });

    it('S1: refuses the all-zero MAC', function () {
      assert.match(
        einval(() => parseMac('00:00:00:00:00:00'), 'all-zero'),
        /all-zero/,
      );
    });

    it('S2: refuses the broadcast MAC, in either case', function () {
      assert.match(
        einval(() => parseMac('ff:ff:ff:ff:ff:ff'), 'broadcast'),
        /broadcast/,
      );
      assert.match(
        einval(() => parseMac('FF:FF:FF:FF:FF:FF'), 'broadcast'),
        /broadcast/,
      );
    });

    it('S3: refuses every multicast MAC (I/G bit set), and accepts the same with the bit clear', function () {
      for (const mac of ['01:00:5e:00:00:01', '33:33:00:00:00:01', '01:80:c2:00:00:00']) {
        assert.match(
          einval(() => parseMac(mac), mac),
          /multicast/,
        );
      }
      for (let octet = 0; octet < 256; octet += 1) {
        const first = octet.toString(16).padStart(2, '0');
        const mac = `${first}:11:22:33:44:55`;
        if (octet & 1) {
          assert.match(
            einval(() => parseMac(mac), mac),
            /multicast/,
            mac,
          );
          assert.match(
            einval(() => parseMac(mac.toUpperCase()), mac),
            /multicast/,
            mac,
          );
        } else {
          assert.equal(parseMac(mac.toUpperCase()), mac);
        }
      }
    });

    it('S4: refuses malformed strings with the reason', function () {
      const malformed: [string, string][] = [
        ['00:11:22:33:44', '5 octets'],
        ['00:11:22:33:44:55:66', '7 octets'],
        ['0:11:22:33:44:55', 'single-digit octet'],
        ['00:11:22:33:44:5', 'single-digit last octet'],
        ['000:11:22:33:44:55', 'three-digit octet'],
        ['00-11-22-33-44-55', 'dashes'],
        ['0011.2233.4455', 'dots (Cisco form)'],
        ['001122334455', 'no separators'],
        ['00:11:22:33:44:GG', 'GG'],
        ['00:11:22:33:44:5g', 'non-hex digit'],
        ['00:11-22:33:44:55', 'mixed separators'],
        ['00:11:22-33-44-55', 'mixed separators'],
        ['00:11:22:33:44:55:', 'trailing separator'],
        [':00:11:22:33:44:55', 'leading separator'],
        ['00::11:22:33:44:55', 'double separator'],
        [' 02:00:00:00:00:01', 'leading space'],
        ['02:00:00:00:00:01 ', 'trailing space'],
        ['02:00:00:00:00:01\n', 'trailing newline'],
        ['\t02:00:00:00:00:01', 'leading tab'],
        ['02:00:00:00:00:01\0', 'trailing NUL'],
        ['02:00:00\0:00:00:01', 'embedded NUL'],
        ['02:00:00:00:00:01\u200b', 'zero-width space'],
        ['０2:00:00:00:00:01', 'full-width digit'],
        ['02:00:00:00:00:00:00:01', '64-bit EUI-64'],
        ['80:00:00:48:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:cb:a1', '20-byte IPoIB address'],
        ['', 'empty'],
        ['::::::', 'separators only'],
        ['0x02:00:00:00:00:01', 'hex prefix'],
      ];
      for (const [input, what] of malformed) {
        const message = einval(() => parseMac(input), what);
        assert.match(message, /not six colon-separated hex octets/, what);
        assert.ok(
          message.includes(JSON.stringify(input)),
          `${what}: the message shows the input escaped`,
        );
      }
    });

    it('S4: refuses non-strings, including objects whose toString gives a valid MAC', function () {
      const values: unknown[] = [
        undefined,
        null,
        0x020000000001,
        true,
        ['02', '00', '00', '00', '00', '01'],
        Buffer.from('020000000001', 'hex'),
        { toString: () => '02:00:00:00:00:01' },
        new String('02:00:00:00:00:01'),
        Symbol('02:00:00:00:00:01'),
      ];
      for (const value of values) {
        assert.match(
          einval(() => parseMac(value), typeof value),
          /must be a string/,
        );
      }
    });

    it('names what it validated in the message', function () {
      assert.match(
        einval(() => parseMac('zz', 'MAC for flannel.1'), 'label'),
        /^EINVAL: MAC for flannel\.1 /,
      );
    });
  });

  describe('validateInterfaceName (E1)', function () {
    it('accepts valid names and returns them unchanged', function () {
      for (const name of [
        'flannel.1',
        'flannel-v6.1',
        'eth0',
        'a',
        'a'.repeat(15),
        'vx_0',
        '1a',
        'a1',
        '0x1',
        '-',
        '~!@#$%^&*()+=',
        '...',
        '.a',
        'lo',
      ]) {
        assert.equal(validateInterfaceName(name), name, name);
      }
    });

    it('refuses the names the kernel and systemd refuse, with EINVAL and errno -22', function () {
      const table: [unknown, RegExp, string][] = [
        ['a'.repeat(16), /longer than 15 bytes/, '16 bytes'],
        ['a'.repeat(64), /longer than 15 bytes/, '64 bytes'],
        ['', /is empty/, 'empty'],
        ['.', /not allowed/, "'.'"],
        ['..', /not allowed/, "'..'"],
        ['/', /contains "\/"/, "'/'"],
        ['a/b', /contains "\/"/, 'slash'],
        ['../etc', /contains "\/"/, 'path traversal'],
        ['a:b', /contains ":"/, 'colon (alias)'],
        ['eth0:1', /contains ":"/, 'alias'],
        ['a b', /whitespace/, 'space'],
        [' a', /whitespace/, 'leading space'],
        ['a ', /whitespace/, 'trailing space'],
        ['a\tb', /whitespace/, 'tab'],
        ['a\nb', /whitespace/, 'newline'],
        ['a\0b', /control/, 'NUL'],
        ['a\x01', /control/, 'SOH'],
        ['a\x7f', /control/, 'DEL'],
        ['a\u00a0b', /non-ASCII/, 'no-break space'],
        ['flännel.1', /non-ASCII/, 'non-ASCII'],
        ['eth\u{1f600}', /non-ASCII/, 'emoji'],
        ['0', /all digits/, 'single digit'],
        ['123', /all digits/, 'all digits'],
        ['9'.repeat(15), /all digits/, '15 digits'],
        [42, /must be a string/, 'number'],
        [null, /must be a string/, 'null'],
        [undefined, /must be a string/, 'undefined'],
        [{ toString: () => 'eth0' }, /must be a string/, 'object'],
      ];
      for (const [input, reason, what] of table) {
        assert.match(
          einval(() => validateInterfaceName(input), what),
          reason,
          what,
        );
      }
    });

    it('counts bytes, not characters: multi-byte names over 15 bytes are too long', function () {
      // 8 characters, 16 bytes in UTF-8.
      const name = 'é'.repeat(8);
      assert.equal(name.length, 8);
      assert.match(
        einval(() => validateInterfaceName(name), 'multi-byte'),
        /longer than 15 bytes/,
      );
      // 5 characters, 15 bytes: within the length, still refused as non-ASCII.
      assert.match(
        einval(() => validateInterfaceName('€'.repeat(5)), '€'),
        /non-ASCII/,
      );
    });
  });

  describe('compileInterfaceGlob (S7)', function () {
    it("refuses '*', '**', '?' and other all-wildcard patterns unless allowAll", function () {
      for (const pattern of ['*', '**', '?', '??', '*?', '?*?']) {
        assert.match(
          einval(() => compileInterfaceGlob(pattern), pattern),
          /matches every interface/,
        );
        const all = compileInterfaceGlob(pattern, true);
        assert.equal(all.prefix, '');
      }
      const star = compileInterfaceGlob('*', true);
      for (const name of ['lo', 'eth0', 'flannel.1', ''])
        assert.equal(star.matches(name), true, name);
    });

    it("refuses empty, '/', ':', whitespace, over-long and non-string patterns", function () {
      const table: [unknown, RegExp][] = [
        ['', /empty/],
        ['/', /'\/'/],
        ['flannel/*', /'\/'/],
        ['flannel:*', /':'/],
        ['flannel *', /whitespace/],
        ['flannel\t*', /whitespace/],
        ['a'.repeat(65), /too long/],
        // Globs no interface name can satisfy (names are at most 15 bytes, never '..' or digits only).
        ['abcdefghijklmnop', /longer than 15 bytes/],
        ['abcdefghijklmnop*', /can never match/],
        ['a?'.repeat(8), /can never match/],
        ['..', /not allowed/],
        ['1234', /all digits/],
        [7, /must be a string/],
        [null, /must be a string/],
      ];
      for (const [pattern, reason] of table) {
        assert.match(
          einval(() => compileInterfaceGlob(pattern), String(pattern)),
          reason,
        );
      }
      assert.equal(compileInterfaceGlob('a'.repeat(15)).matches('a'.repeat(15)), true);
      assert.equal(compileInterfaceGlob(`${'a'.repeat(15)}*`).matches('a'.repeat(15)), true);
    });

    it("'flannel.*' matches flannel.N only: '.' is literal and the match is anchored", function () {
      const glob = compileInterfaceGlob('flannel.*');
      assert.equal(glob.pattern, 'flannel.*');
      assert.equal(glob.prefix, 'flannel.');
      for (const name of ['flannel.1', 'flannel.100', 'flannel.', 'flannel.x.y']) {
        assert.equal(glob.matches(name), true, name);
      }
      for (const name of [
        'flannelX1',
        'flannel1',
        'flannel',
        'xflannel.1',
        'flannel-v6.1',
        'lo',
        'eth0',
      ]) {
        assert.equal(glob.matches(name), false, name);
      }
      const v6 = compileInterfaceGlob('flannel-v6.*');
      assert.equal(v6.matches('flannel-v6.1'), true);
      assert.equal(v6.matches('flannel.1'), false);
      assert.equal(v6.prefix, 'flannel-v6.');
    });

    it("'?' matches exactly one character and '*' any run, anywhere in the pattern", function () {
      const one = compileInterfaceGlob('eth?');
      assert.equal(one.prefix, 'eth');
      assert.deepEqual(
        ['eth0', 'ethX', 'eth', 'eth10', 'veth0'].map((n) => one.matches(n)),
        [true, true, false, false, false],
      );
      const middle = compileInterfaceGlob('vx*-in');
      assert.equal(middle.prefix, 'vx');
      assert.deepEqual(
        ['vx-in', 'vx0-in', 'vx0-in2', 'vx0-out'].map((n) => middle.matches(n)),
        [true, true, false, false],
      );
      const exact = compileInterfaceGlob('lo');
      assert.equal(exact.prefix, 'lo');
      assert.equal(exact.matches('lo'), true);
      assert.equal(exact.matches('lo0'), false);
    });

    it('treats regular-expression characters literally', function () {
      const table: [string, string[], string[]][] = [
        ['a+b', ['a+b'], ['aab', 'ab']],
        ['a(b)', ['a(b)'], ['ab']],
        ['[ab]', ['[ab]'], ['a', 'b']],
        ['a|b', ['a|b'], ['a', 'b']],
        ['^lo$', ['^lo$'], ['lo']],
        ['a{2}', ['a{2}'], ['aa']],
        ['a\\d', ['a\\d'], ['a1']],
        ['a.b*', ['a.b', 'a.bcd'], ['axb', 'axbcd']],
      ];
      for (const [pattern, yes, no] of table) {
        const glob = compileInterfaceGlob(pattern);
        for (const name of yes) assert.equal(glob.matches(name), true, `${pattern} ~ ${name}`);
        for (const name of no) assert.equal(glob.matches(name), false, `${pattern} !~ ${name}`);
      }
    });

    it('prefix property: every name a glob matches starts with its prefix (seeded fuzz)', function () {
      const random = prng(0x5eed_0007);
      const alphabet = 'ab.-_*?1';
      const pick = (length: number): string =>
        Array.from({ length }, () => alphabet[Math.floor(random() * alphabet.length)] ?? 'a').join(
          '',
        );
      let matched = 0;
      for (let i = 0; i < 2000; i += 1) {
        const pattern = pick(1 + Math.floor(random() * 6));
        let glob;
        try {
          glob = compileInterfaceGlob(pattern);
        } catch (error) {
          // Refused: all wildcards, or a plain name no interface may have.
          const impossibleName = !/[*?]/.test(pattern) && /^([0-9]+|\.|\.\.)$/.test(pattern);
          assert.ok(
            /^[*?]+$/.test(pattern) || impossibleName,
            `${JSON.stringify(pattern)} refused: ${String(error)}`,
          );
          continue;
        }
        const wildcard = pattern.search(/[*?]/);
        assert.equal(glob.prefix, wildcard < 0 ? pattern : pattern.slice(0, wildcard));
        for (let j = 0; j < 20; j += 1) {
          const name = pick(Math.floor(random() * 8)).replace(/[*?]/g, 'z');
          if (!glob.matches(name)) continue;
          matched += 1;
          assert.ok(name.startsWith(glob.prefix), `${pattern} matched ${name}`);
        }
      }
      assert.ok(matched > 100, `only ${matched} matches: the fuzz is not exercising anything`);
    });
  });

  describe('resolveNetnsPath', function () {
    it('maps ip-netns names to /run/netns and keeps absolute paths', function () {
      assert.equal(resolveNetnsPath('fgt-1'), '/run/netns/fgt-1');
      assert.equal(resolveNetnsPath('a'.repeat(255)), `/run/netns/${'a'.repeat(255)}`);
      assert.equal(resolveNetnsPath('/proc/1/ns/net'), '/proc/1/ns/net');
      assert.equal(resolveNetnsPath('/run/netns/x'), '/run/netns/x');
      assert.equal(resolveNetnsPath('.hidden'), '/run/netns/.hidden');
    });

    it('refuses empty, dot, slash-containing, over-long and non-string names', function () {
      const table: [unknown, RegExp][] = [
        ['', /non-empty/],
        ['.', /not valid/],
        ['..', /not valid/],
        ['a/b', /not valid/],
        ['../etc', /not valid/],
        ['a'.repeat(256), /not valid/],
        [undefined, /non-empty/],
        [42, /non-empty/],
      ];
      for (const [name, reason] of table) {
        assert.match(
          einval(() => resolveNetnsPath(name as string), String(name)),
          reason,
        );
      }
    });
  });

  describe('JS-side fuzz (10 000 seeded random strings each)', function () {
    const HEX = '0123456789abcdefABCDEF';
    const NOISE = ':-. \t\n\0gGxX/é€\u{1f600}';

    /** Mostly MAC-shaped strings with mutations, some pure noise. */
    function macLike(random: () => number): string {
      const octet = (): string =>
        Array.from({ length: random() < 0.9 ? 2 : 1 + Math.floor(random() * 3) }, () => {
          const pool = random() < 0.97 ? HEX : NOISE;
          return pool[Math.floor(random() * pool.length)] ?? '0';
        }).join('');
      const count = random() < 0.8 ? 6 : Math.floor(random() * 9);
      const separator = (): string =>
        random() < 0.95 ? ':' : (NOISE[Math.floor(random() * NOISE.length)] ?? ':');
      let text = '';
      for (let i = 0; i < count; i += 1) text += (i === 0 ? '' : separator()) + octet();
      if (random() < 0.05) text = ` ${text}`;
      if (random() < 0.05) text += '\0';
      return text;
    }

    function nameLike(random: () => number): string {
      const length = Math.floor(random() * 20);
      let text = '';
      for (let i = 0; i < length; i += 1) {
        const r = random();
        if (r < 0.85) text += String.fromCharCode(0x21 + Math.floor(random() * 94));
        else if (r < 0.9) text += '0123456789'[Math.floor(random() * 10)] ?? '0';
        else if (r < 0.95) text += String.fromCharCode(Math.floor(random() * 0x21));
        else text += String.fromCodePoint(0x7f + Math.floor(random() * 0x1ff00));
      }
      return random() < 0.05 ? '9'.repeat(1 + Math.floor(random() * 15)) : text;
    }

    /** Independent oracle for parseMac acceptance. */
    function macOracle(text: string): string | null {
      if (!/^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$/.test(text)) return null;
      const lower = text.toLowerCase();
      const first = parseInt(lower.slice(0, 2), 16);
      if ((first & 1) === 1 || lower === '00:00:00:00:00:00') return null;
      return lower;
    }

    /** Independent oracle for validateInterfaceName acceptance. */
    function nameOracle(text: string): boolean {
      const bytes = Buffer.from(text, 'utf8');
      if (bytes.length < 1 || bytes.length > 15 || text === '.' || text === '..') return false;
      if ([...bytes].some((b) => b <= 0x20 || b >= 0x7f || b === 0x2f || b === 0x3a)) return false;
      return !/^[0-9]+$/.test(text);
    }

    it('parseMac: only EINVAL-shaped errors, acceptance agrees with an oracle, accepted values are fixed points', function () {
      const random = prng(0xfab1_0001);
      let accepted = 0;
      for (let i = 0; i < 10_000; i += 1) {
        const input = macLike(random);
        const expected = macOracle(input);
        let result: string | undefined;
        try {
          result = parseMac(input);
        } catch (error) {
          assert.ok(
            error instanceof RangeError && isSystemError(error),
            `${JSON.stringify(input)}: ${String(error)}`,
          );
          assert.equal(error.code, 'EINVAL');
          assert.equal(error.errno, -22);
        }
        assert.equal(result ?? null, expected, JSON.stringify(input));
        if (result !== undefined) {
          accepted += 1;
          assert.equal(parseMac(result), result);
          assert.equal(macBytes(result).length, 6);
        }
      }
      assert.ok(
        accepted > 1000 && accepted < 9000,
        `${accepted} accepted: the fuzz must hit both sides`,
      );
    });

    it('validateInterfaceName: only EINVAL-shaped errors, acceptance agrees with an oracle, identity on success', function () {
      const random = prng(0xfab1_0002);
      let accepted = 0;
      for (let i = 0; i < 10_000; i += 1) {
        const input = nameLike(random);
        let ok = false;
        try {
          assert.equal(validateInterfaceName(input), input);
          ok = true;
        } catch (error) {
          if (error instanceof assert.AssertionError) throw error;
          assert.ok(
            error instanceof RangeError && isSystemError(error),
            `${JSON.stringify(input)}: ${String(error)}`,
          );
          assert.equal(error.code, 'EINVAL');
          assert.equal(error.errno, -22);
        }
        assert.equal(ok, nameOracle(input), JSON.stringify(input));
        if (ok) {
          accepted += 1;
          assert.equal(validateInterfaceName(input), input, 're-validates to itself');
        }
      }
      assert.ok(
        accepted > 1000 && accepted < 9000,
        `${accepted} accepted: the fuzz must hit both sides`,
      );
    });
  });
});

describe('options of every entry point (lib/core/options.ts): one check for the library and the CLI', function () {
  /** The EINVAL an entry point rejects with, before it opens anything. */
  async function rejected(call: () => Promise<unknown>): Promise<SystemError> {
    try {
      await call();
    } catch (error) {
      assert.ok(isSystemError(error), String(error));
      assert.equal(error.code, 'EINVAL', error.message);
      assert.equal(error.syscall, undefined, `${error.message}: refused before any system call`);
      return error;
    }
    return assert.fail('accepted');
  }

  it('readStatus, ensureVtep and runDoctor refuse a misspelt option, naming it', async function () {
    const calls: [string, (options: object) => Promise<unknown>][] = [
      ['readStatus', (options) => readStatus(options as StatusOptions)],
      ['ensureVtep', (options) => ensureVtep(options as EnsureVtepOptions)],
      ['runDoctor', (options) => runDoctor(options as DoctorOptions)],
    ];
    for (const [name, call] of calls) {
      const error = await rejected(() => call({ ofload: 'none' }));
      assert.match(error.message, new RegExp(`^EINVAL: ${name}: unknown option ofload \\(known: `));
      assert.equal(error.option, 'ofload');
    }
  });

  it('their values too: a wrong type or range is EINVAL before anything opens', async function () {
    for (const [call, message] of [
      [() => ensureVtep({ pin: 'yes' } as unknown as EnsureVtepOptions), /option pin yes/],
      [() => ensureVtep({ addrAssignType: 7 }), /addrAssignType 7: expected a whole number/],
      [() => ensureVtep({ dryRun: 1 } as unknown as EnsureVtepOptions), /option dryRun number 1/],
      [() => runDoctor({ root: 'etc' }), /option root etc: expected an absolute path/],
      [() => runDoctor({ fix: 'no' } as unknown as DoctorOptions), /option fix no/],
      [() => runDoctor({ passive: 1 } as unknown as DoctorOptions), /option passive number 1/],
      [() => runDoctor({ dryRun: true }), /dryRun plans the fixes: it needs fix/],
      [() => readStatus({ interfaces: ['*'] }), /matches every interface/],
    ] as [() => Promise<unknown>, RegExp][]) {
      assert.match((await rejected(call)).message, message);
    }
  });

  it('every fixed offload policy is checked against the kernel feature table, once', async function () {
    const misspelt = { 'tx-checksum-ip-generics': false };
    for (const call of [
      () => readStatus({ offload: misspelt }),
      () => ensureVtep({ offload: misspelt }),
      () => runDoctor({ offload: misspelt }),
    ]) {
      const error = await rejected(call);
      assert.match(error.message, /option offload: unknown feature tx-checksum-ip-generics/);
      assert.equal(error.option, 'offload');
    }
    assert.ok(kernelFeatureNames().has('tx-checksum-ip-generic'));
    assert.equal(kernelFeatureNames(), kernelFeatureNames(), 'read once per process');
    assert.deepEqual(fixedOffloadPolicy(undefined), DEFAULT_OFFLOAD);
    assert.deepEqual(fixedOffloadPolicy('none'), {});
    await rejected(async () => fixedOffloadPolicy('auto'));
    await rejected(async () => fixedOffloadPolicy({ 'tx-checksum-ip-generic': 1 }));
  });

  it('the small checks: choices, booleans, absolute paths, lists', async function () {
    assert.equal(choiceOption(undefined, ['a', 'b'], 'x', 'a'), 'a');
    assert.equal(choiceOption('b', ['a', 'b'], 'x', 'a'), 'b');
    assert.equal(booleanOption(undefined, 'x', true), true);
    assert.equal(absolutePathOption('/run/x', 'x'), '/run/x');
    assert.deepEqual(
      listOption(['a'], 'x', (entry) => String(entry)),
      ['a'],
    );
    for (const call of [
      () => choiceOption('c', ['a', 'b'], 'x', 'a'),
      () => choiceOption(1, ['a', 'b'], 'x', 'a'),
      () => booleanOption('false', 'x', true),
      () => absolutePathOption('run/x', 'x'),
      () => absolutePathOption('/run/x\0', 'x'),
      () => listOption('a', 'x', String),
      () => rejectUnknownOptions([], ['a'], 'f'),
      () => rejectUnknownOptions(null as unknown as object, ['a'], 'f'),
    ]) {
      const error = await rejected(async () => call());
      assert.match(error.message, /\bx\b|f: expected an object/);
    }
  });
});
