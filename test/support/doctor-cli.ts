/**
 * `flannel-guard doctor` hosted exactly as lib/cli.ts hosts a subcommand
 * (`root.addCommand(doctorCommand())` under an exitOverride root, a commander error meaning
 * exit status 2), so the tests run the command as a user runs the CLI.
 */
import { Command, CommanderError } from 'commander';

import { doctorCommand } from '../../lib/doctor/command';

export async function main(argv: string[]): Promise<number> {
  const root = new Command('flannel-guard').exitOverride().showHelpAfterError(false);
  root.addCommand(doctorCommand());
  try {
    await root.parseAsync(argv, { from: 'user' });
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    process.stderr.write(
      `flannel-guard: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    return 1;
  }
}

if (require.main === module) {
  void main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
