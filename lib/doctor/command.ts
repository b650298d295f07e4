/**
 * `flannel-guard doctor`, as a commander Command the CLI adds with
 * `root.addCommand(doctorCommand())`. Exit status: 0 when no check fails (warnings allowed),
 * 1 when one does (or the doctor itself fails), 2 for a bad flag or value, 77 without the
 * privileges to read the namespace. What --fix cannot change is listed as "NOT FIXED".
 */

import { Command, Option } from 'commander';

import { parsePeerSpec, validatePeer, type PeerExpectation } from '../peers';
import { invalidArgument, isSystemError } from '../errors';
import { netnsPathProblem, readRegularFile } from '../files';
import { DEFAULT_INTERFACES } from '../guard';
import type { DesiredMacSource } from '../sources';
import {
  compileInterfaceGlob,
  parseMac,
  resolveNetnsPath,
  validateInterfaceName,
} from '../validate';
import type { DoctorOptions } from './index';

export interface DoctorCommandDeps {
  /** The published MACs when the node is in a cluster (e.g. the Kubernetes node annotation). */
  source?: DesiredMacSource;
  /** The other nodes' published VTEPs when the node is in a cluster. */
  peers?: () => Promise<readonly PeerExpectation[]>;
}

interface DoctorFlags {
  json?: boolean;
  fix?: boolean;
  verbose?: boolean;
  root: string;
  netns?: string;
  iface?: string[];
  mac?: string[];
  peer?: string[];
  peersFile?: string;
  offload?: string[];
}

function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

function parseMacs(values: readonly string[]): Record<string, string> {
  const macs: Record<string, string> = {};
  for (const value of values) {
    const separator = value.indexOf('=');
    if (separator <= 0) throw invalidArgument(`--mac ${value}: expected IFACE=MAC`);
    const device = validateInterfaceName(value.slice(0, separator));
    macs[device] = parseMac(value.slice(separator + 1), `--mac ${value}`);
  }
  return macs;
}

function parseOffload(values: readonly string[]): Record<string, boolean> | 'none' {
  if (values.includes('none')) {
    if (values.length > 1) throw invalidArgument('--offload none cannot be combined with features');
    return 'none';
  }
  const policy: Record<string, boolean> = {};
  for (const value of values) {
    const match = /^([a-z0-9-]+)=(on|off)$/.exec(value);
    if (!match?.[1]) throw invalidArgument(`--offload ${value}: expected FEATURE=on|off or none`);
    policy[match[1]] = match[2] === 'on';
  }
  return policy;
}

/** Room for the peers of a 5000-node cluster several times over. */
const MAX_PEERS_FILE_BYTES = 16 * 1024 * 1024;

/** --peers-file: a JSON array of peers, or an object with a `peers` array. */
export function readPeersFile(path: string): PeerExpectation[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readRegularFile(path, MAX_PEERS_FILE_BYTES, '--peers-file'));
  } catch (error) {
    throw invalidArgument(
      `--peers-file ${path}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  const list = Array.isArray(parsed)
    ? (parsed as unknown[])
    : typeof parsed === 'object' &&
        parsed !== null &&
        Array.isArray((parsed as { peers?: unknown }).peers)
      ? (parsed as { peers: unknown[] }).peers
      : null;
  if (list === null) {
    throw invalidArgument(`--peers-file ${path}: expected an array of peers or { "peers": [...] }`);
  }
  return list.map((peer) => validatePeer(peer));
}

function options(flags: DoctorFlags, deps: DoctorCommandDeps): DoctorOptions {
  const interfaces = flags.iface ?? [...DEFAULT_INTERFACES];
  for (const glob of interfaces) compileInterfaceGlob(glob);
  const explicitPeers = [
    ...(flags.peer ?? []).map((spec) => parsePeerSpec(spec)),
    ...(flags.peersFile === undefined ? [] : readPeersFile(flags.peersFile)),
  ];
  const result: DoctorOptions = {
    root: flags.root,
    interfaces,
    fix: flags.fix ?? false,
  };
  if (flags.netns !== undefined) {
    const problem = netnsPathProblem(resolveNetnsPath(flags.netns));
    if (problem !== null) throw invalidArgument(`--netns ${flags.netns}: ${problem}`);
    result.netns = flags.netns;
  }
  if (flags.mac) result.mac = parseMacs(flags.mac);
  if (deps.source) result.source = deps.source;
  if (explicitPeers.length > 0) result.peers = explicitPeers;
  else if (deps.peers) result.peers = deps.peers;
  if (flags.offload) result.offload = parseOffload(flags.offload);
  return result;
}

async function doctor(flags: DoctorFlags, deps: DoctorCommandDeps): Promise<number> {
  try {
    // Loaded when the doctor runs: `watch` and `status` never need its checks.
    const [{ runDoctor }, { formatReport }] = await Promise.all([
      import('./index.js'),
      import('./format.js'),
    ]);
    const report = await runDoctor(options(flags, deps));
    process.stdout.write(
      flags.json ? `${JSON.stringify(report)}\n` : formatReport(report, flags.verbose ?? false),
    );
    return report.verdict === 'fail' ? 1 : 0;
  } catch (error) {
    if (isSystemError(error) && error.code === 'EINVAL' && error.syscall === undefined) {
      process.stderr.write(`flannel-guard doctor: ${error.message}\n`);
      return 2;
    }
    if (isSystemError(error) && error.code === 'EPERM') {
      process.stderr.write(
        `flannel-guard doctor: ${error.message}\nflannel-guard doctor: run as root or grant ${error.capability ?? 'CAP_NET_ADMIN'}\n`,
      );
      return 77;
    }
    process.stderr.write(
      `flannel-guard doctor: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    return 1;
  }
}

/** The `doctor` subcommand; `deps` wires cluster sources in (the CLI may pass none). */
export function doctorCommand(deps: DoctorCommandDeps = {}): Command {
  return new Command('doctor')
    .description(
      "diagnose the node: .link files, udev rules, NetworkManager, the VTEP's MAC, neighbours, offloads, underlay driver, NAT, VXLAN port",
    )
    .exitOverride()
    .showHelpAfterError(false)
    .option('--json', 'print the report as one JSON object (schema flannel-guard/doctor/v1)')
    .option(
      '--fix',
      'write the MACAddressPolicy=none .link file, set the published MAC back, re-install neighbours, apply the offload policy; prints what it changed',
    )
    .option('--verbose', 'show the evidence of passing checks too')
    .option('--root <dir>', 'read configuration files under this directory', '/')
    .addOption(
      new Option(
        '--netns <name>',
        "network namespace, by ip netns name or path (default: this process's own)",
      ),
    )
    .addOption(
      new Option(
        '--iface <glob>',
        `interfaces to check, repeatable (default: ${DEFAULT_INTERFACES.join(', ')})`,
      ).argParser(collect),
    )
    .addOption(
      new Option(
        '--mac <iface=mac>',
        'the MAC the node published for a device, repeatable',
      ).argParser(collect),
    )
    .addOption(
      new Option(
        '--peer <vtep-ip=mac[@underlay-ip]>',
        "another node's published VTEP (its flannel subnet's .0, VtepMAC, public IP), repeatable",
      ).argParser(collect),
    )
    .option('--peers-file <file>', 'published peers as JSON: [{ "vtepIp", "mac", "underlayIp" }]')
    .addOption(
      new Option(
        '--offload <feature=on|off>',
        "offload policy, repeatable; 'none' checks nothing (default: tx-checksum-ip-generic=off)",
      ).argParser(collect),
    )
    .action(async (flags: DoctorFlags) => {
      process.exitCode = await doctor(flags, deps);
    });
}
