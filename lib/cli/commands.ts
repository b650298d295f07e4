/**
 * The flags of `doctor`, `undo`, `cni install` and `cni uninstall`, for parsing and --help. What
 * each does is loaded when it runs: `watch` stays resident for the node's life and never needs
 * their modules (eight of them; about 50 kB of its RSS, as measured).
 */
import {
  jsonFlag,
  ifaceFlag,
  kubeconfigFlag,
  macFlag,
  netnsFlag,
  nodeFlag,
  offloadFlag,
  stateDirFlag,
} from './common';
import type { CommandSpec, FlagSpec } from './flags';

export const doctorCommand: CommandSpec = {
  name: 'doctor',
  description:
    "diagnose the node: .link files, udev rules, NetworkManager, the VTEP's MAC, neighbours, offloads, underlay driver, NAT, VXLAN port",
  flags: [
    jsonFlag('print the report as one JSON object (schema flannel-guard/doctor/v1)'),
    {
      name: 'fix',
      description:
        'write the MACAddressPolicy=none .link file, set the published MAC back, re-install neighbours, apply the offload policy; prints what it changed',
    },
    {
      name: 'dry-run',
      description:
        'with --fix: print the plan (each file with its content, each command, each device write) and change nothing',
    },
    {
      name: 'passive',
      description:
        'send nothing: skip the offload-probe check (one ICMP echo, UDP datagram and TCP SYN to each of up to 8 peers)',
    },
    stateDirFlag('where --fix notes what it changed, with what was there before (for undo)'),
    { name: 'verbose', description: 'show the evidence of passing checks too' },
    {
      name: 'root',
      value: '<dir>',
      description: 'read configuration files under this directory',
      default: '/',
    },
    netnsFlag,
    ifaceFlag('check'),
    macFlag('the MAC the node published for a device, repeatable'),
    {
      name: 'peer',
      value: '<vtep-ip=mac[@underlay-ip]>',
      repeatable: true,
      description:
        "another node's published VTEP (its flannel subnet's .0, VtepMAC, public IP), repeatable",
    },
    {
      name: 'peers-file',
      value: '<file>',
      description: 'published peers as JSON: [{ "vtepIp", "mac", "underlayIp" }]',
    },
    offloadFlag('checks nothing'),
    {
      name: 'cluster',
      description:
        "read every Node: this node's published MACs and its peers from them, and the VtepMACs published twice (needs list on nodes)",
    },
    nodeFlag,
    kubeconfigFlag,
  ],
  run: async (flags) => (await import('./doctor.js')).doctor(flags),
};

export const undoCommand: CommandSpec = {
  name: 'undo',
  description:
    'take back what watch and doctor --fix changed (offload features, files written), as the change journal in the state dir says',
  flags: [
    netnsFlag,
    stateDirFlag('where the change journal is'),
    { name: 'dry-run', description: 'say what it would take back, change nothing' },
    jsonFlag('print one JSON object'),
  ],
  run: async (flags) => (await import('./undo.js')).undo(flags),
};

const binDirFlag: FlagSpec = {
  name: 'bin-dir',
  value: '<dir>',
  description: "the runtime's CNI plugin folder",
  default: '/opt/cni/bin',
};

const confDirFlag: FlagSpec = {
  name: 'conf-dir',
  value: '<dir>',
  description:
    "the runtime's network configuration folder (/etc/cni/net.d): flannel-guard's entry in its first list (flannel's)",
};

export const cniInstallCommand: CommandSpec = {
  name: 'cni install',
  description:
    "copy the CNI shim into the runtime's plugin folder (written beside, then renamed); with --conf-dir, add its entry as the last plugin of the primary configuration list",
  flags: [
    binDirFlag,
    { name: 'shim', value: '<file>', description: "the shim to copy (default: this package's)" },
    confDirFlag,
    {
      name: 'socket',
      value: '<path>',
      description: "the entry's guard socket, when not /run/flannel-guard/cni.sock",
    },
    {
      name: 'watch',
      description:
        "keep the entry there: put it back whenever the list is written again (flannel's installer), until SIGTERM",
    },
  ],
  run: async (flags) => (await import('./cni.js')).install(flags),
};

export const cniUninstallCommand: CommandSpec = {
  name: 'cni uninstall',
  description:
    'remove the shim from the plugin folder and, with --conf-dir, its entry from the list (the file as its author wrote it)',
  flags: [binDirFlag, confDirFlag],
  run: async (flags) => (await import('./cni.js')).uninstall(flags),
};
