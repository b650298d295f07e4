#!/usr/bin/env -S node --no-memory-reducer --max-semi-space-size=1 --max-opt=1
/**
 * flannel-guard command line: `watch` runs the guard until SIGINT/SIGTERM;
 * `status` prints the managed devices once; `doctor` diagnoses the node.
 * Exit status: 0 success, 1 a failure while running, 2 a bad flag or value,
 * 77 missing privileges. The interpreter line sizes V8 for a long-running
 * daemon with a small live set: no memory reducer (it would wake an idle
 * guard every few seconds to shrink a heap that does not grow) and a 1 MiB
 * young generation (scavenges stay cheap; the default lets it grow to 16 MiB
 * of resident memory the guard never needs); and no optimizing tier above
 * Sparkplug: TurboFan's own code and what it compiles cost ~8 MiB resident,
 * and the guard's short bursts of JavaScript take no more CPU at baseline
 * (bench:scale, both ways). deploy/Dockerfile's ENTRYPOINT repeats the flags.
 */
import type { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';

import { FlannelGuard, type FlannelGuardEvents, type FlannelGuardOptions } from '../guard';
import { guardConfig, withSource } from '../guard/config';
import { cniInstallCommand, cniUninstallCommand, doctorCommand, undoCommand } from './commands';
import { DEFAULT_FIGHT_POLICY } from '../guard/fight-tracker';
import { RANGES } from '../core/validate';
import {
  checkNetnsFlag,
  exitStatusOf,
  ifaceFlag,
  integerFlag,
  jsonFlag,
  kubeconfigFlag,
  meshDirectRoutingFlag,
  macFlag,
  stateDirFlag,
  netnsFlag,
  nodeFlag,
  offloadFlag,
  parseIfaceFlags,
  parseMacFlags,
  parseOffloadFlags,
} from './common';
import { UsageError, runProgram, type CommandSpec, type Flags, type ProgramSpec } from './flags';
import { DEFAULT_MESH_GRACE_MS, DEFAULT_UDEV_ROOT } from '../core/defaults';
import type { MeshMode } from '../mesh/view';
import { writeErr, writeOut } from './stdio';
import { cniSocketPath, serveCni } from './cni-socket';
import { GUARD_EVENT_NAMES, Output, printer } from './output';
import { NODE_CONDITION_TYPE } from '../kubernetes/condition';
import { detectCluster, type ClusterSettings } from '../kubernetes/cluster';
import type { ListenAddress } from '../kubernetes/listen';
import type { WatchServices } from './services';
import { packageVersion } from '../core/package-version';
import { followLaunchers, npmLaunchers } from './launcher';

/** The metrics and health endpoint's address when running against a cluster. */
export const DEFAULT_METRICS_ADDRESS = '127.0.0.1:9464';

interface CommonFlags {
  iface: string[] | undefined;
  mac: string[] | undefined;
  offload: string[] | undefined;
  netns: string | undefined;
  json: boolean;
}

interface WatchFlags extends CommonFlags {
  pin: 'first-seen' | 'none';
  dryRun: boolean;
  receiveBuffer: string | undefined;
  maxRewrites: string;
  rewriteWindow: string;
  quietPeriod: string;
  kernelFilter: boolean;
  strategy: 'revert' | 'adopt';
  node: string | undefined;
  kubeconfig: string | undefined;
  metricsAddress: string | undefined;
  sourceTimeout: string;
  onNetnsDeleted: 'close' | 'continue';
  allowUserNamespace: boolean;
  stateDir: string;
  cniSocket: string;
  udevRoot: string;
  nodeCondition: boolean;
  mesh: string | undefined;
  meshGrace: string;
  meshDirectRouting: boolean;
}

function commonFlags(flags: Flags): CommonFlags {
  return {
    iface: flags.list('iface'),
    mac: flags.list('mac'),
    offload: flags.list('offload'),
    netns: flags.value('netns'),
    json: flags.has('json'),
  };
}

function watchFlags(flags: Flags): WatchFlags {
  return {
    ...commonFlags(flags),
    pin: flags.required('pin') as WatchFlags['pin'],
    dryRun: flags.has('dry-run'),
    receiveBuffer: flags.value('receive-buffer'),
    maxRewrites: flags.required('max-rewrites'),
    rewriteWindow: flags.required('rewrite-window'),
    quietPeriod: flags.required('quiet-period'),
    kernelFilter: !flags.has('no-kernel-filter'),
    strategy: flags.required('strategy') as WatchFlags['strategy'],
    node: flags.value('node'),
    kubeconfig: flags.value('kubeconfig'),
    metricsAddress: flags.value('metrics-address'),
    sourceTimeout: flags.required('source-timeout'),
    onNetnsDeleted: flags.required('on-netns-deleted') as WatchFlags['onNetnsDeleted'],
    allowUserNamespace: flags.has('allow-user-namespace'),
    stateDir: flags.required('state-dir'),
    cniSocket: flags.required('cni-socket'),
    udevRoot: flags.required('udev-root'),
    nodeCondition: flags.has('node-condition'),
    mesh: flags.value('mesh'),
    meshGrace: flags.required('mesh-grace'),
    meshDirectRouting: flags.has('mesh-direct-routing'),
  };
}

function commonOptions(
  flags: CommonFlags,
): Pick<FlannelGuardOptions, 'netns' | 'interfaces' | 'mac' | 'offload'> {
  checkNetnsFlag(flags.netns);
  const options: Pick<FlannelGuardOptions, 'netns' | 'interfaces' | 'mac' | 'offload'> = {
    interfaces: parseIfaceFlags(flags.iface),
  };
  const offload = parseOffloadFlags(flags.offload);
  if (offload !== undefined) options.offload = offload;
  const mac = parseMacFlags(flags.mac);
  if (mac) options.mac = mac;
  if (flags.netns !== undefined) options.netns = flags.netns;
  return options;
}

// --- Kubernetes, metrics -------------------------------------------------------

/** Errors name options (EINVAL, a usage error): the exit mapper says their flags. */
function clusterOf(flags: Pick<WatchFlags, 'node' | 'kubeconfig'>): ClusterSettings | null {
  return detectCluster({ node: flags.node, kubeconfig: flags.kubeconfig }, process.env, existsSync);
}

/**
 * Starts what runs next to the guard with a cluster or a metrics address
 * (null: neither); 'stopped' when a signal arrived meanwhile.
 */
async function startServices(
  flags: WatchFlags,
  output: Output,
): Promise<WatchServices | null | 'stopped'> {
  const cluster = clusterOf(flags);
  const address = flags.metricsAddress ?? (cluster ? DEFAULT_METRICS_ADDRESS : 'off');
  let metricsAddress: ListenAddress | 'off' = 'off';
  if (address !== 'off') {
    try {
      // Loaded when used: it needs node:net.
      const { parseListenAddress } = await import('../kubernetes/listen.js');
      metricsAddress = parseListenAddress(address);
    } catch (error) {
      throw new UsageError(`--metrics-address ${(error as Error).message}`);
    }
  }
  const sourceTimeoutMs = integerFlag('--source-timeout', flags.sourceTimeout, RANGES.timerMs);
  if (flags.strategy === 'adopt') {
    if (!cluster) {
      throw new UsageError(
        '--strategy adopt needs the node annotation: --kubeconfig, or KUBECONFIG with --node or NODE_NAME, or a pod',
      );
    }
  }
  if (flags.nodeCondition && !cluster) {
    throw new UsageError(
      '--node-condition needs the Node: --kubeconfig, or KUBECONFIG with --node or NODE_NAME, or a pod',
    );
  }
  if (flags.mesh !== undefined && flags.mesh !== 'off' && !cluster) {
    throw new UsageError(
      `--mesh ${flags.mesh} needs the Nodes: --kubeconfig, or KUBECONFIG with --node or NODE_NAME, or a pod`,
    );
  }
  // On by default with a cluster: reporting reads only. A dry run repairs nothing.
  const meshMode = flags.mesh ?? (cluster ? 'report' : 'off');
  const mesh =
    meshMode === 'off'
      ? null
      : {
          mode: flags.dryRun ? ('report' as const) : (meshMode as MeshMode),
          graceMs: integerFlag('--mesh-grace', flags.meshGrace, RANGES.timerMs),
          directRouting: flags.meshDirectRouting,
        };
  if (!cluster && metricsAddress === 'off') return null;
  let stop = (): void => {};
  const interrupted = new Promise<void>((resolve) => {
    stop = resolve;
  });
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    // Loaded only when used: prom-client alone takes longer to load than the guard.
    const { WatchServices: Services } = await import('./services.js');
    const services = await Services.start({
      cluster,
      metricsAddress,
      sourceTimeoutMs,
      dryRun: flags.dryRun,
      nodeCondition: flags.nodeCondition,
      mesh,
      log: output.line,
      interrupted,
    });
    return services;
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
}

// --- commands -----------------------------------------------------------------

async function watch(flags: WatchFlags): Promise<number> {
  const options: FlannelGuardOptions = {
    ...commonOptions(flags),
    pin: flags.pin,
    fight: {
      maxRewrites: integerFlag('--max-rewrites', flags.maxRewrites, RANGES.count),
      windowMs: integerFlag('--rewrite-window', flags.rewriteWindow, RANGES.timerMs),
      quietMs: integerFlag('--quiet-period', flags.quietPeriod, RANGES.timerMs),
    },
  };
  if (flags.dryRun) options.dryRun = true;
  if (!flags.kernelFilter) options.kernelFilter = false;
  options.onNetnsDeleted = flags.onNetnsDeleted;
  if (flags.allowUserNamespace) options.allowUserNamespace = true;
  // Checked by guardConfig, as a library caller's would be; 'off' is the flags' word for none.
  if (flags.stateDir !== 'off') options.stateDir = flags.stateDir;
  options.udevRoot = flags.udevRoot === 'off' ? false : flags.udevRoot;
  if (flags.receiveBuffer !== undefined) {
    options.receiveBuffer = integerFlag(
      '--receive-buffer',
      flags.receiveBuffer,
      RANGES.receiveBuffer,
    );
  }
  // Parsed once, before the cluster is reached; the annotation source joins it when there is one.
  const config = guardConfig(options);
  const cniSocket = cniSocketPath(flags.cniSocket, flags.stateDir);
  const output = new Output(flags.json);
  const services = await startServices(flags, output);
  if (services === 'stopped') return 0;
  const print = printer(output, services);
  let guard: FlannelGuard;
  try {
    guard = FlannelGuard.create(
      services?.source ? withSource(config, services.source, flags.strategy) : config,
    );
  } catch (error) {
    await services?.close();
    throw error;
  }
  // Handlers first: a signal that arrives while the guard starts up still closes it cleanly.
  const signal = { received: false };
  let unfollow = (): void => {};
  const stopped = new Promise<number>((resolve) => {
    const stop = (): void => {
      signal.received = true;
      guard.close();
      resolve(0);
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    // Started by npm: stop with it, as on SIGTERM (launcher.ts says why).
    unfollow = followLaunchers(npmLaunchers(process.env, process.ppid), stop);
    // Closed by itself (its namespace was deleted): a failure.
    guard.once('close', () => {
      resolve(signal.received ? 0 : 1);
    });
  });
  const events = guard as EventEmitter;
  for (const name of GUARD_EVENT_NAMES) {
    events.on(name, (payload: FlannelGuardEvents[typeof name][0]) => {
      print(name, payload);
    });
  }
  services?.attach(guard);
  let cni: { close(): Promise<void> } | undefined;
  try {
    await guard.ready();
    if (cniSocket !== null && !signal.received) {
      cni = await serveCni(cniSocket, guard, services?.meshSnapshot, output.line);
    }
  } catch (error) {
    guard.close();
    if (!signal.received) {
      await services?.close();
      output.release();
      throw error;
    }
  }
  const code = await stopped;
  unfollow();
  await cni?.close();
  await services?.close();
  output.release();
  return code;
}

async function status(flags: Flags): Promise<number> {
  // Loaded when asked for: it needs the Kubernetes client.
  if (flags.has('mesh')) return (await import('./status-mesh.js')).meshStatus(flags);
  return deviceStatus(commonFlags(flags), flags.required('state-dir'));
}

async function deviceStatus(flags: CommonFlags, stateDir: string): Promise<number> {
  const { offload, ...options } = commonOptions(flags);
  if (offload === 'auto')
    throw new UsageError('--offload auto: only watch measures; status shows a fixed policy');
  const { printStatus } = await import('./status-device.js');
  return printStatus(
    offload === undefined ? options : { ...options, offload },
    stateDir,
    flags.json,
  );
}

/** Which devices, their desired MACs and offloads, where: what `watch` and `status` share. */
const deviceFlags = [
  ifaceFlag('manage'),
  macFlag('desired MAC of a device, repeatable (default: none)'),
  offloadFlag(
    "leaves offloads alone; 'auto' (watch) turns tx-checksum-ip-generic off only where probes show it broken",
  ),
  netnsFlag,
];

const watchCommand: CommandSpec = {
  name: 'watch',
  description: 'guard the devices until SIGINT or SIGTERM',
  flags: [
    ...deviceFlags,
    {
      name: 'pin',
      value: '<mode>',
      description: 'desired MAC of devices without --mac: the first one seen, or none',
      choices: ['first-seen', 'none'],
      default: 'first-seen',
    },
    { name: 'dry-run', description: 'report what would be done, never write' },
    jsonFlag('one JSON object per line (field "event" first)'),
    {
      name: 'receive-buffer',
      value: '<bytes>',
      description: 'netlink socket receive buffer (default: the kernel default)',
    },
    {
      name: 'on-netns-deleted',
      value: '<action>',
      description: 'when the --netns namespace is deleted under the guard',
      choices: ['close', 'continue'],
      default: 'close',
    },
    stateDirFlag(
      "where the state that survives a crash is kept (each device's permanent neighbours and pinned MAC, one file per namespace) and what it changed (for undo)",
    ),
    {
      name: 'cni-socket',
      value: '<path|on|off>',
      description:
        "answer the CNI shim's calls there from the guard's live state (on: cni.sock in --state-dir, where the shim looks by default)",
      default: 'off',
    },
    {
      name: 'udev-root',
      value: '<dir|off>',
      description:
        "where systemd-udevd's machine-id, .link files and database are read, to prove who rewrote a MAC (a container mounts the host's)",
      default: DEFAULT_UDEV_ROOT,
    },
    {
      name: 'allow-user-namespace',
      description:
        'run inside a user namespace other than the initial one (its capabilities do not reach the node)',
    },
    {
      name: 'no-kernel-filter',
      description:
        'let every link notification of the namespace reach the guard (default: filtered in the kernel)',
    },
    {
      name: 'max-rewrites',
      value: '<n>',
      description: 'rewrites within the window after which a device is contested and left alone',
      default: String(DEFAULT_FIGHT_POLICY.maxRewrites),
    },
    {
      name: 'rewrite-window',
      value: '<ms>',
      description: 'window for counting rewrites',
      default: String(DEFAULT_FIGHT_POLICY.windowMs),
    },
    {
      name: 'quiet-period',
      value: '<ms>',
      description: 'a contested device is corrected again after this long without a rewrite',
      default: String(DEFAULT_FIGHT_POLICY.quietMs),
    },
    {
      name: 'node-condition',
      description: `keep the Node condition ${NODE_CONDITION_TYPE} (False while a device stays drifted or is contested); needs patch on nodes/status`,
    },
    {
      name: 'mesh',
      value: '<mode>',
      description:
        "check every peer's ARP/FDB entries on this node against what its Node publishes (report), write them as flanneld would (repair), and delete entries no Node publishes (prune); needs list and watch on nodes (default: report with a cluster, else off)",
      choices: ['off', 'report', 'repair', 'prune'],
    },
    {
      name: 'mesh-grace',
      value: '<ms>',
      description: "how long a peer's entries may differ from what it publishes before it counts",
      default: String(DEFAULT_MESH_GRACE_MS),
    },
    meshDirectRoutingFlag,
    {
      name: 'strategy',
      value: '<strategy>',
      description:
        "on a rewrite: set the published MAC back (revert), or keep the device's MAC and publish it in the node annotation (adopt)",
      choices: ['revert', 'adopt'],
      default: 'revert',
    },
    nodeFlag,
    kubeconfigFlag,
    {
      name: 'metrics-address',
      value: '<host:port|off>',
      description: `serve /metrics, /healthz and /readyz there (default: ${DEFAULT_METRICS_ADDRESS} with the Kubernetes source, off otherwise)`,
    },
    {
      name: 'source-timeout',
      value: '<ms>',
      description: 'how long to wait for the first read of the Node before guarding without it',
      default: '10000',
    },
  ],
  run: (flags) => watch(watchFlags(flags)),
};

const statusCommand: CommandSpec = {
  name: 'status',
  description: 'print the managed devices once: MAC vs desired, offloads, neighbours',
  flags: [
    ...deviceFlags,
    jsonFlag('print JSON'),
    {
      name: 'mesh',
      description:
        "instead: every peer's ARP/FDB entries here against what its Node publishes (node, VTEP IP, published MAC, ARP MAC, FDB dst, verdict); exit 1 unless all ok",
    },
    meshDirectRoutingFlag,
    nodeFlag,
    kubeconfigFlag,
    stateDirFlag("where the change journal is: what watch and doctor --fix changed (undo's list)"),
  ],
  run: (flags) => status(flags),
};

const PROGRAM: ProgramSpec = {
  name: 'flannel-guard',
  description: "Keeps flannel's VXLAN device at its published MAC and offload policy",
  version: packageVersion,
  // prettier-ignore
  commands: [watchCommand, statusCommand, doctorCommand, undoCommand, cniInstallCommand, cniUninstallCommand],
};

export async function main(argv: readonly string[]): Promise<number> {
  try {
    return await runProgram(PROGRAM, argv, { out: writeOut });
  } catch (error) {
    return exitStatusOf(error, PROGRAM.name, writeErr);
  }
}

if (require.main === module) {
  void main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
