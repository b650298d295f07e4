/**
 * The flags `watch`, `status` and `doctor` share, their parsers, and the one
 * mapping from an error to an exit status and its line on stderr.
 */
import { isSystemError } from '../core/errors';
import { netnsPathProblem } from '../core/files';
import { DEFAULT_INTERFACES, DEFAULT_OFFLOAD, DEFAULT_STATE_DIR } from '../core/defaults';
import {
  compileInterfaceGlob,
  describeRange,
  parseMac,
  resolveNetnsPath,
  validateInterfaceName,
  type NumberRange,
} from '../core/validate';
import { UsageError, type FlagSpec } from './flags';

export const EXIT_FAILURE = 1;
const EXIT_USAGE = 2;
const EXIT_NOPERM = 77;

export const netnsFlag: FlagSpec = {
  name: 'netns',
  value: '<name>',
  description: "network namespace, by ip netns name or path (default: this process's own)",
};

export function ifaceFlag(verb: string): FlagSpec {
  return {
    name: 'iface',
    value: '<glob>',
    repeatable: true,
    description: `interfaces to ${verb}, repeatable (default: ${DEFAULT_INTERFACES.join(', ')})`,
  };
}

export function macFlag(description: string): FlagSpec {
  return { name: 'mac', value: '<iface=mac>', repeatable: true, description };
}

const defaultOffload = Object.entries(DEFAULT_OFFLOAD)
  .map(([feature, on]) => `${feature}=${on ? 'on' : 'off'}`)
  .join(', ');

export function offloadFlag(none: string): FlagSpec {
  return {
    name: 'offload',
    value: '<feature=on|off>',
    repeatable: true,
    description: `offload policy, repeatable; 'none' ${none} (default: ${defaultOffload})`,
  };
}

export const nodeFlag: FlagSpec = {
  name: 'node',
  value: '<name>',
  description:
    "this node's name in the cluster, whose annotation gives the desired MACs (default: $NODE_NAME)",
};

export const meshDirectRoutingFlag: FlagSpec = {
  name: 'mesh-direct-routing',
  description:
    "flannel runs with Backend.DirectRouting: a peer with neither ARP nor FDB entry here is routed directly on this node's L2 segment (verdict direct), not missing",
};

/** --state-dir: the guard's state and the change journal (`undo` reads it). */
export function stateDirFlag(what: string): FlagSpec {
  return {
    name: 'state-dir',
    value: '<dir|off>',
    description: `${what}; the default is $FLANNEL_GUARD_STATE_DIR when set`,
    // Read once at start, like every flag.
    default: process.env.FLANNEL_GUARD_STATE_DIR ?? DEFAULT_STATE_DIR,
  };
}

export const kubeconfigFlag: FlagSpec = {
  name: 'kubeconfig',
  value: '<file>',
  description:
    "kubeconfig to reach the cluster (default: $KUBECONFIG, else the pod's service account)",
};

export const jsonFlag = (description: string): FlagSpec => ({ name: 'json', description });

/** A flag's whole number in its documented range (digits only: no 1e3, 0x10 or 1.0). */
export function integerFlag(flag: string, value: string, range: NumberRange): number {
  const number = /^[0-9]{1,16}$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isInteger(number) || number < range.min || number > range.max) {
    throw new UsageError(`${flag} ${value}: expected ${describeRange(range)}`);
  }
  return number;
}

/** `--iface GLOB` (repeatable), each glob compiled as the guard compiles it; the defaults when not given. */
export function parseIfaceFlags(values: readonly string[] | undefined): string[] {
  const interfaces = values ? [...values] : [...DEFAULT_INTERFACES];
  for (const glob of interfaces) compileInterfaceGlob(glob);
  return interfaces;
}

/** `--mac IFACE=MAC`, each name and MAC checked as the guard checks them; MACs normalized. */
export function parseMacFlags(
  values: readonly string[] | undefined,
): Record<string, string> | undefined {
  if (!values) return undefined;
  const macs: Record<string, string> = {};
  for (const value of values) {
    const separator = value.indexOf('=');
    if (separator <= 0) throw new UsageError(`--mac ${value}: expected IFACE=MAC`);
    const device = validateInterfaceName(value.slice(0, separator));
    macs[device] = parseMac(value.slice(separator + 1), `--mac ${value}`);
  }
  return macs;
}

/**
 * `--offload FEATURE=on|off` (repeatable) or `none` (or, for `watch`, `auto`); undefined when
 * not given. The feature names are the library's to check (core/options.ts), as a caller's are.
 */
export function parseOffloadFlags(
  values: readonly string[] | undefined,
): Record<string, boolean> | 'none' | 'auto' | undefined {
  if (!values) return undefined;
  if (values.includes('auto')) {
    if (values.length > 1) throw new UsageError('--offload auto cannot be combined with features');
    return 'auto';
  }
  if (values.includes('none')) {
    if (values.length > 1) throw new UsageError('--offload none cannot be combined with features');
    return 'none';
  }
  const policy: Record<string, boolean> = {};
  for (const value of values) {
    const match = /^([a-z0-9-]+)=(on|off)$/.exec(value);
    if (!match?.[1] || !match[2]) {
      throw new UsageError(`--offload ${value}: expected FEATURE=on|off or none`);
    }
    policy[match[1]] = match[2] === 'on';
  }
  return policy;
}

/** `--netns`: a namespace file that exists and is one. */
export function checkNetnsFlag(netns: string | undefined): void {
  if (netns === undefined) return;
  const problem = netnsPathProblem(resolveNetnsPath(netns));
  if (problem !== null) throw new UsageError(`--netns ${netns}: ${problem}`);
}

/** The flag of a library option: allowUserNamespace is --allow-user-namespace. */
export function flagOf(option: string): string {
  return `--${option.replace(/[A-Z]/g, (letter) => `-${letter.toLowerCase()}`)}`;
}

/** An error's message as the CLI says it: the options it names (`option NAME`), as flags. */
function messageOf(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const { option } = error as { option?: unknown };
  return typeof option !== 'string'
    ? error.message
    : error.message.replace(/\boption ([a-z][A-Za-z0-9]*)/g, (_, name: string) => flagOf(name));
}

/**
 * The exit status for an error, after its line on stderr: 2 for a usage
 * error (also the library's EINVAL without a system call: a value it
 * refused), 77 for missing privileges, 1 for anything else.
 */
export function exitStatusOf(
  error: unknown,
  program: string,
  writeErr: (text: string) => void,
): number {
  const message = messageOf(error);
  if (error instanceof UsageError) {
    writeErr(`${program}: ${message}\n`);
    return EXIT_USAGE;
  }
  if (isSystemError(error) && error.code === 'EINVAL' && error.syscall === undefined) {
    writeErr(`${program}: ${message}\n`);
    return EXIT_USAGE;
  }
  if (isSystemError(error) && error.code === 'EPERM') {
    // One line; root is told what it lacks, not to be root.
    const capability = error.capability ?? 'CAP_NET_ADMIN';
    const advice =
      process.getuid?.() === 0
        ? `grant ${capability} (this process runs as root without it: its container or setpriv dropped it)`
        : `grant ${capability}, or run as root`;
    writeErr(`${program}: ${message}; ${advice}\n`);
    return EXIT_NOPERM;
  }
  writeErr(`${program}: ${message}\n`);
  return EXIT_FAILURE;
}
