/** Runs `flannel-guard doctor ARGS` as a user runs it, in a child process. */
import { join } from 'node:path';

import { runCommand, type ChildResult } from './node-child';

/** The doctor, run through the CLI's own bin. */
export const DOCTOR_CLI = join(__dirname, '..', '..', 'lib', 'cli', 'main.js');

export interface DoctorRun extends ChildResult {
  /** The parsed report when --json was given and the output parses. */
  report: unknown;
}

export async function runDoctorCli(
  args: readonly string[],
  prefix: readonly string[] = [],
): Promise<DoctorRun> {
  const result = await runCommand([...prefix, process.execPath, DOCTOR_CLI, 'doctor', ...args], {
    timeoutMs: 30_000,
  });
  let report: unknown = null;
  if (args.includes('--json')) {
    try {
      report = JSON.parse(result.stdout);
    } catch {
      report = null;
    }
  }
  return { ...result, report };
}
