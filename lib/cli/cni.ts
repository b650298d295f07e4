/**
 * `flannel-guard cni install` and `cni uninstall`: the shim into the runtime's bin folder (the
 * DaemonSet's init container), and, opted into, flannel-guard's entry in the primary network
 * configuration list, kept there while flannel's installer rewrites the file (`--watch`). Their
 * flags are in commands.ts.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import {
  addToConflist,
  installShim,
  keepInConflist,
  removeFromConflist,
  removeShim,
  type ConflistChange,
} from '../cni/install';
import { messageOf } from '../core/errors';
import { EXIT_FAILURE } from './common';
import { UsageError, type Flags } from './flags';
import { writeOut } from './stdio';

const PACKAGE_ROOT = join(__dirname, '..', '..', '..');

/** This checkout's build of the shim, else the package's prebuilt one for this machine. */
function packagedShim(): string {
  const built = join(PACKAGE_ROOT, 'build', 'flannel-guard-cni');
  if (existsSync(built)) return built;
  return join(PACKAGE_ROOT, 'prebuilds', `linux-${process.arch}`, 'flannel-guard-cni');
}

function say(change: ConflistChange): string {
  const where = change.file ?? 'no configuration list';
  return `${where}: ${change.result}${change.reason === undefined ? '' : ` (${change.reason}): left alone`}`;
}

export async function install(flags: Flags): Promise<number> {
  const binDir = flags.required('bin-dir');
  const confDir = flags.value('conf-dir');
  const socket = flags.value('socket');
  if (flags.has('watch') && confDir === undefined) {
    throw new UsageError('--watch keeps the configuration list entry: it needs --conf-dir');
  }
  if (socket !== undefined && !socket.startsWith('/')) {
    throw new UsageError(`--socket ${socket}: an absolute path`);
  }
  const shim = flags.value('shim') ?? packagedShim();
  try {
    writeOut(`cni install: ${join(binDir, 'flannel-guard-cni')} ${installShim(shim, binDir)}\n`);
  } catch (error) {
    writeOut(`cni install: ${binDir}: ${messageOf(error)} (nothing written)\n`);
    return EXIT_FAILURE;
  }
  if (confDir === undefined) return 0;
  const entry = socket === undefined ? {} : { socket };
  if (!flags.has('watch')) {
    const change = addToConflist(confDir, entry);
    writeOut(`cni install: ${say(change)}\n`);
    return change.result === 'refused' ? EXIT_FAILURE : 0;
  }
  await new Promise<void>((resolve) => {
    const stop = keepInConflist(confDir, entry, (change) => {
      writeOut(`cni install: ${say(change)}\n`);
    });
    const end = (): void => {
      stop();
      resolve();
    };
    process.once('SIGINT', end);
    process.once('SIGTERM', end);
  });
  return 0;
}

export function uninstall(flags: Flags): Promise<number> {
  const binDir = flags.required('bin-dir');
  const confDir = flags.value('conf-dir');
  const lines: string[] = [];
  let failed = false;
  try {
    if (confDir !== undefined) lines.push(say(removeFromConflist(confDir)));
    const removed = removeShim(binDir);
    lines.push(`${join(binDir, 'flannel-guard-cni')}: ${removed ? 'removed' : 'absent'}`);
  } catch (error) {
    lines.push(messageOf(error));
    failed = true;
  }
  writeOut(lines.map((line) => `cni uninstall: ${line}\n`).join(''));
  return Promise.resolve(failed ? EXIT_FAILURE : 0);
}
