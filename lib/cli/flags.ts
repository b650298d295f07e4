/**
 * The command line's one flag layer. Each command declares its flags once;
 * the same declaration parses the arguments, gives the defaults and prints
 * `--help`. Long flags only (`--name value` or `--name=value`), plus `-h` and,
 * before a command, `-V`. Every mistake is a UsageError: one line, exit 2.
 *
 * Written here rather than taken from a framework: the guard is a daemon on
 * every node, and commander alone loads node:child_process (with net, dgram
 * and the stream modules, ~2.5 MiB resident) that the guard never uses.
 * node:util's parseArgs would carry only the tokenising below (`--name=value`
 * and `--name value`, `--`): not the choices, the repeatable-or-last rule, the
 * help or the one-line messages the tests hold the CLI to, and its strict mode
 * takes `--netns --json` as a missing value only by its own wording, which would
 * have to be mapped back by error code. The loop is shorter than that mapping.
 */

/** A flag or value that is wrong: printed as one line, exit status 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export interface FlagSpec {
  /** Without the dashes: `iface`, `dry-run`, `no-kernel-filter`. */
  readonly name: string;
  /** The value's placeholder, e.g. `<glob>`; a flag without one is a switch. */
  readonly value?: string;
  readonly description: string;
  /** Given more than once, every value counts (else the last one does). */
  readonly repeatable?: boolean;
  readonly choices?: readonly string[];
  /** The value when the flag is absent, as the help shows it. */
  readonly default?: string;
}

export interface CommandSpec {
  readonly name: string;
  readonly description: string;
  readonly flags: readonly FlagSpec[];
  run(flags: Flags): Promise<number>;
}

export interface ProgramSpec {
  readonly name: string;
  readonly description: string;
  readonly version: () => string;
  readonly commands: readonly CommandSpec[];
}

export interface ProgramOutput {
  out(text: string): void;
}

function flagLabel(spec: FlagSpec): string {
  return spec.value === undefined ? `--${spec.name}` : `--${spec.name} ${spec.value}`;
}

/** The parsed flags of one command, read by name as the declaration says. */
export class Flags {
  readonly #specs: ReadonlyMap<string, FlagSpec>;
  readonly #values: ReadonlyMap<string, string | string[] | true>;

  constructor(
    specs: ReadonlyMap<string, FlagSpec>,
    values: ReadonlyMap<string, string | string[] | true>,
  ) {
    this.#specs = specs;
    this.#values = values;
  }

  #spec(name: string, kind: 'switch' | 'value' | 'list'): FlagSpec {
    const spec = this.#specs.get(name);
    const actual =
      spec === undefined
        ? undefined
        : spec.value === undefined
          ? 'switch'
          : spec.repeatable
            ? 'list'
            : 'value';
    // A programming error, not a user's: the command reads a flag it never declared.
    if (actual !== kind) throw new TypeError(`--${name} is not declared as a ${kind}`);
    return spec as FlagSpec;
  }

  /** A switch: given or not. */
  has(name: string): boolean {
    this.#spec(name, 'switch');
    return this.#values.has(name);
  }

  /** A single value: the last one given, else the default. */
  value(name: string): string | undefined {
    const spec = this.#spec(name, 'value');
    const value = this.#values.get(name);
    return typeof value === 'string' ? value : spec.default;
  }

  /** A single value that has a default. */
  required(name: string): string {
    const value = this.value(name);
    if (value === undefined) throw new TypeError(`--${name} has no default`);
    return value;
  }

  /** A repeatable flag's values in order; undefined when not given. */
  list(name: string): string[] | undefined {
    this.#spec(name, 'list');
    const value = this.#values.get(name);
    return Array.isArray(value) ? [...value] : undefined;
  }
}

/**
 * Parses a command's arguments (after its name) against its declaration;
 * `invokedAs` (`flannel-guard watch`) names it in the messages.
 */
export function parseFlags(
  command: CommandSpec,
  args: readonly string[],
  invokedAs = command.name,
): Flags {
  const specs = new Map(command.flags.map((spec) => [spec.name, spec]));
  const values = new Map<string, string | string[] | true>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] ?? '';
    if (!arg.startsWith('--') || arg === '--') {
      const what = arg === '--' ? (args[i + 1] ?? '') : arg;
      throw new UsageError(
        arg.startsWith('-') && arg !== '--'
          ? `unknown option '${arg}' (see ${invokedAs} --help)`
          : `${invokedAs} takes no argument '${what}'`,
      );
    }
    const equals = arg.indexOf('=');
    const name = arg.slice(2, equals < 0 ? undefined : equals);
    const spec = specs.get(name);
    if (spec === undefined) {
      throw new UsageError(`unknown option '--${name}' (see ${invokedAs} --help)`);
    }
    if (spec.value === undefined) {
      if (equals >= 0) throw new UsageError(`option '--${name}' takes no value`);
      values.set(name, true);
      continue;
    }
    let value: string;
    if (equals >= 0) {
      value = arg.slice(equals + 1);
    } else {
      const next = args[i + 1];
      if (next === undefined || next.startsWith('--')) {
        throw new UsageError(`option '${flagLabel(spec)}' argument missing`);
      }
      value = next;
      i++;
    }
    if (spec.choices && !spec.choices.includes(value)) {
      throw new UsageError(`--${name} ${value}: expected ${spec.choices.join(' or ')}`);
    }
    if (spec.repeatable) {
      const previous = values.get(name);
      values.set(name, [...(Array.isArray(previous) ? previous : []), value]);
    } else {
      values.set(name, value);
    }
  }
  return new Flags(specs, values);
}

function table(rows: readonly (readonly [string, string])[]): string {
  const width = Math.max(...rows.map(([left]) => left.length));
  return rows.map(([left, right]) => `  ${left.padEnd(width)}  ${right}`).join('\n');
}

function flagHelp(spec: FlagSpec): string {
  const notes = [
    ...(spec.choices ? [`choices: ${spec.choices.map((c) => `"${c}"`).join(', ')}`] : []),
    ...(spec.default === undefined ? [] : [`default: "${spec.default}"`]),
  ];
  return notes.length === 0 ? spec.description : `${spec.description} (${notes.join(', ')})`;
}

export function commandHelp(program: ProgramSpec, command: CommandSpec): string {
  const rows: [string, string][] = command.flags.map((spec) => [flagLabel(spec), flagHelp(spec)]);
  rows.push(['-h, --help', 'display help for command']);
  return `Usage: ${program.name} ${command.name} [options]\n\n${command.description}\n\nOptions:\n${table(rows)}\n`;
}

export function programHelp(program: ProgramSpec): string {
  const commands: [string, string][] = program.commands.map((c) => [
    `${c.name} [options]`,
    c.description,
  ]);
  commands.push(['help [command]', 'display help for command']);
  const options = table([
    ['-V, --version', 'output the version number'],
    ['-h, --help', 'display help for command'],
  ]);
  return `Usage: ${program.name} [options] [command]\n\n${program.description}\n\nOptions:\n${options}\n\nCommands:\n${table(commands)}\n`;
}

function findCommand(program: ProgramSpec, name: string): CommandSpec {
  const command = program.commands.find((c) => c.name === name);
  if (command === undefined) {
    throw new UsageError(`unknown command '${name}' (see ${program.name} --help)`);
  }
  return command;
}

/**
 * Runs the command `argv` names and returns its exit status; `--help`,
 * `help COMMAND` and `--version` print to `output.out` and return 0. A
 * mistake in the arguments throws a UsageError before the command runs.
 */
export async function runProgram(
  program: ProgramSpec,
  argv: readonly string[],
  output: ProgramOutput,
): Promise<number> {
  const [first, ...rest] = argv;
  if (first === undefined) {
    throw new UsageError(
      `a command is needed: ${program.commands.map((c) => c.name).join(', ')} (see ${program.name} --help)`,
    );
  }
  if (first === '-V' || first === '--version') {
    output.out(`${program.version()}\n`);
    return 0;
  }
  if (first === '-h' || first === '--help') {
    output.out(programHelp(program));
    return 0;
  }
  if (first === 'help') {
    output.out(
      rest.length === 0
        ? programHelp(program)
        : commandHelp(program, findCommand(program, rest.join(' '))),
    );
    return 0;
  }
  // A command of two words (`cni install`): the first names its group.
  const grouped = program.commands.some((c) => c.name.startsWith(`${first} `));
  const command = findCommand(program, grouped ? `${first} ${rest.shift() ?? ''}`.trim() : first);
  const end = rest.indexOf('--');
  const own = end < 0 ? rest : rest.slice(0, end);
  if (own.includes('-h') || own.includes('--help')) {
    output.out(commandHelp(program, command));
    return 0;
  }
  return command.run(parseFlags(command, rest, `${program.name} ${command.name}`));
}
