/**
 * The CLI's flag layer (lib/cli/flags.ts) on its own: parsing against a
 * declaration (both value forms, switches, repeatable and last-wins flags,
 * choices, defaults), every kind of mistake as one UsageError, the help made
 * from the same declaration, and the program's dispatch (--version, --help,
 * help COMMAND, unknown or missing command). A seeded random round trip
 * checks that whatever a valid command line says is what the command reads.
 * Pure: no kernel, no privileges. The bin itself is tested in cli.test.ts.
 */
import assert from 'node:assert/strict';

import {
  UsageError,
  commandHelp,
  parseFlags,
  programHelp,
  runProgram,
  type CommandSpec,
  type Flags,
  type FlagSpec,
  type ProgramSpec,
} from '../lib/cli/flags';
import { prng } from './support/prng';
import { exitStatusOf, flagOf } from '../lib/cli/common';
import { invalidArgument, systemError } from '../lib/core/errors';

const FLAGS: FlagSpec[] = [
  { name: 'iface', value: '<glob>', repeatable: true, description: 'interfaces' },
  { name: 'netns', value: '<name>', description: 'namespace' },
  {
    name: 'pin',
    value: '<mode>',
    choices: ['first-seen', 'none'],
    default: 'first-seen',
    description: 'pin',
  },
  { name: 'window', value: '<ms>', default: '5000', description: 'window' },
  { name: 'dry-run', description: 'dry run' },
  { name: 'no-kernel-filter', description: 'no filter' },
];

/** What the command was last run with. */
let ranWith: Flags | undefined;
const lastRun = (): Flags | undefined => ranWith;
const COMMAND: CommandSpec = {
  name: 'watch',
  description: 'guard the devices',
  flags: FLAGS,
  run: (flags) => {
    ranWith = flags;
    return Promise.resolve(7);
  },
};

const PROGRAM: ProgramSpec = {
  name: 'prog',
  description: 'a program',
  version: () => '1.2.3',
  commands: [COMMAND],
};

function usageError(operation: () => unknown, reason: RegExp): void {
  assert.throws(operation, (error: unknown) => {
    assert.ok(error instanceof UsageError, String(error));
    assert.match(error.message, reason);
    assert.ok(!error.message.includes('\n'), 'one line');
    return true;
  });
}

async function run(argv: string[]): Promise<{ code: number; out: string }> {
  let out = '';
  const code = await runProgram(PROGRAM, argv, { out: (text) => (out += text) });
  return { code, out };
}

describe('the CLI flag layer (pure)', function () {
  it('reads values in both forms, switches, repeatable flags in order, the last of a single one', function () {
    const flags = parseFlags(COMMAND, [
      '--iface',
      'flannel.*',
      '--iface=vx?',
      '--netns',
      'a',
      '--netns=b',
      '--dry-run',
      '--window=',
    ]);
    assert.deepEqual(flags.list('iface'), ['flannel.*', 'vx?']);
    assert.equal(flags.value('netns'), 'b');
    assert.equal(flags.has('dry-run'), true);
    assert.equal(flags.has('no-kernel-filter'), false);
    assert.equal(flags.value('window'), '', 'an empty value given with = is a value');
    assert.equal(flags.required('pin'), 'first-seen', 'the default');
  });

  it('a value may look like anything but a long flag: -1, a path, text with =', function () {
    const flags = parseFlags(COMMAND, ['--netns', '-1', '--iface', 'a=b', '--window', '/x']);
    assert.equal(flags.value('netns'), '-1');
    assert.deepEqual(flags.list('iface'), ['a=b']);
    assert.equal(flags.value('window'), '/x');
  });

  it('every mistake is one UsageError naming the flag or argument', function () {
    usageError(() => parseFlags(COMMAND, ['--bogus']), /unknown option '--bogus'/);
    usageError(() => parseFlags(COMMAND, ['--bogus=1']), /unknown option '--bogus'/);
    usageError(() => parseFlags(COMMAND, ['-x']), /unknown option '-x'/);
    usageError(() => parseFlags(COMMAND, ['--netns']), /option '--netns <name>' argument missing/);
    usageError(() => parseFlags(COMMAND, ['--netns', '--dry-run']), /argument missing/);
    usageError(() => parseFlags(COMMAND, ['--dry-run=yes']), /'--dry-run' takes no value/);
    usageError(
      () => parseFlags(COMMAND, ['--pin', 'bogus']),
      /--pin bogus: expected first-seen or none/,
    );
    usageError(() => parseFlags(COMMAND, ['stray']), /takes no argument 'stray'/);
    usageError(() => parseFlags(COMMAND, ['--', '--dry-run']), /takes no argument '--dry-run'/);
    usageError(() => parseFlags(COMMAND, ['--bogus'], 'prog watch'), /\(see prog watch --help\)/);
  });

  it('a command reading a flag it never declared, or as the wrong kind, is a programming error', function () {
    const flags = parseFlags(COMMAND, []);
    assert.throws(() => flags.value('nope'), TypeError);
    assert.throws(() => flags.value('iface'), TypeError);
    assert.throws(() => flags.list('netns'), TypeError);
    assert.throws(() => flags.has('netns'), TypeError);
    assert.throws(() => flags.required('netns'), TypeError);
  });

  it('the help lists every declared flag with its placeholder, choices and default', function () {
    const text = commandHelp(PROGRAM, COMMAND);
    assert.match(text, /^Usage: prog watch \[options\]\n\nguard the devices\n/);
    for (const spec of FLAGS) {
      const label = spec.value === undefined ? `--${spec.name}` : `--${spec.name} ${spec.value}`;
      assert.ok(text.includes(label), label);
    }
    assert.ok(text.includes('(choices: "first-seen", "none", default: "first-seen")'), text);
    assert.ok(text.includes('(default: "5000")'), text);
    assert.match(
      programHelp(PROGRAM),
      /^Usage: prog \[options\] \[command\][\s\S]*watch \[options\] +guard the devices/,
    );
  });

  it('dispatch: --version, --help, help COMMAND, COMMAND --help, then the command itself', async function () {
    assert.deepEqual(await run(['-V']), { code: 0, out: '1.2.3\n' });
    assert.deepEqual(await run(['--version']), { code: 0, out: '1.2.3\n' });
    assert.equal((await run(['--help'])).out, programHelp(PROGRAM));
    assert.equal((await run(['help'])).out, programHelp(PROGRAM));
    assert.equal((await run(['help', 'watch'])).out, commandHelp(PROGRAM, COMMAND));
    assert.equal((await run(['watch', '--netns', 'x', '-h'])).out, commandHelp(PROGRAM, COMMAND));
    ranWith = undefined;
    assert.deepEqual(await run(['watch', '--dry-run']), { code: 7, out: '' });
    assert.equal(lastRun()?.has('dry-run'), true);
    await assert.rejects(run([]), /a command is needed: watch/);
    await assert.rejects(run(['bogus']), /unknown command 'bogus'/);
    await assert.rejects(run(['help', 'bogus']), /unknown command 'bogus'/);
    await assert.rejects(run(['watch', '--bogus']), /see prog watch --help/);
  });

  it('seeded round trip: what a random valid command line says is what the command reads', function () {
    const random = prng(0x5eed_f1a6);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    const words = ['a', 'flannel.*', '-1', 'x=y', '/run/netns/n', '', 'none', 'first-seen'];
    for (let round = 0; round < 500; round++) {
      const argv: string[] = [];
      const expected = new Map<string, string | string[] | true>();
      const count = Math.floor(random() * 8);
      for (let i = 0; i < count; i++) {
        const spec = pick(FLAGS);
        if (spec.value === undefined) {
          argv.push(`--${spec.name}`);
          expected.set(spec.name, true);
          continue;
        }
        const value = spec.choices ? pick(spec.choices) : pick(words);
        // The separate form cannot carry an empty value or one that looks like a long flag.
        if (random() < 0.5 || value === '') argv.push(`--${spec.name}=${value}`);
        else argv.push(`--${spec.name}`, value);
        const previous = expected.get(spec.name);
        expected.set(
          spec.name,
          spec.repeatable ? [...(Array.isArray(previous) ? previous : []), value] : value,
        );
      }
      const flags = parseFlags(COMMAND, argv);
      const what = `round ${round}: ${JSON.stringify(argv)}`;
      for (const spec of FLAGS) {
        const want = expected.get(spec.name);
        if (spec.value === undefined) assert.equal(flags.has(spec.name), want === true, what);
        else if (spec.repeatable) assert.deepEqual(flags.list(spec.name), want, what);
        else assert.equal(flags.value(spec.name), want ?? spec.default, what);
      }
    }
  });

  it('one exit status per kind of error, one line each, options named by their flags', function () {
    const cases: [unknown, number, RegExp][] = [
      [new UsageError('--pin x: expected first-seen or none'), 2, /^prog: --pin x: expected/],
      [invalidArgument('--mac x: expected IFACE=MAC'), 2, /^prog: EINVAL: --mac x/],
      [
        systemError('EPERM', 'inside a user namespace; allow it (option allowUserNamespace)', {
          syscall: 'userns',
          capability: 'CAP_NET_ADMIN in the initial user namespace',
          option: 'allowUserNamespace',
        }),
        77,
        /^prog: EPERM: inside a user namespace; allow it \(--allow-user-namespace\); grant CAP_NET_ADMIN in the initial user namespace[^\n]*\n$/,
      ],
      [
        systemError('EINVAL', 'refused by the kernel', { syscall: 'setlink' }),
        1,
        /^prog: EINVAL: refused/,
      ],
      [new Error('anything else'), 1, /^prog: anything else\n$/],
      ['a string', 1, /^prog: a string\n$/],
    ];
    for (const [error, code, text] of cases) {
      let written = '';
      assert.equal(
        exitStatusOf(error, 'prog', (line) => (written += line)),
        code,
        String(error),
      );
      assert.match(written, text);
    }
    assert.equal(flagOf('allowUserNamespace'), '--allow-user-namespace');
    assert.equal(flagOf('json'), '--json');
  });
});
