/**
 * The facts about a host that udev's `.link` matching and persistent MACs depend on, read under
 * a root (`/` on a node, a tree or another process's `/proc/PID/root` elsewhere).
 */
import { readFileSync } from 'node:fs';
import { arch, hostname, release } from 'node:os';

import type { FsRoot } from '../core/fsroot';
import type { HostFacts } from './link-files';
import { parseMachineId } from './persistent-mac';

/** systemd's architecture names by Node's `os.arch()`. */
const ARCHITECTURES: Record<string, string> = {
  x64: 'x86-64',
  ia32: 'x86',
  arm64: 'arm64',
  arm: 'arm',
  ppc64: 'ppc64-le',
  s390x: 's390x',
  riscv64: 'riscv64',
  loong64: 'loongarch64',
};

/** Where udev reads the machine-id from (sd_id128_get_machine). */
export const MACHINE_ID_PATH = '/etc/machine-id';

/** The machine-id under the root, or null when it is missing or not one. */
export function readMachineId(fs: FsRoot): string | null {
  const text = fs.readText(MACHINE_ID_PATH, 4096);
  return text === null ? null : parseMachineId(text);
}

export function readHostFacts(fs: FsRoot, kernelRelease?: string): HostFacts {
  const trim = (text: string | null): string | null =>
    text === null || text.trim() === '' ? null : text.trim();
  let cmdline: string | null = null;
  try {
    cmdline = readFileSync('/proc/cmdline', 'utf8').trim();
  } catch {
    /* unknown */
  }
  return {
    hostname: fs.root === '/' ? hostname() : trim(fs.readText('/etc/hostname', 4096)),
    machineId: readMachineId(fs),
    kernelRelease: kernelRelease ?? release(),
    architecture: ARCHITECTURES[arch()] ?? null,
    kernelCommandLine: fs.root === '/' ? cmdline : null,
  };
}
