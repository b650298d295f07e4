/**
 * The guard's configuration, parsed once: every option validated, defaulted and compiled
 * (the namespace resolved, the globs compiled, the MACs parsed, the offload and fight
 * policies complete), then frozen and passed down unchanged. `FlannelGuard.start(options)`
 * makes one; the CLI makes one from its flags and opens the guard from it.
 */
import {
  DEFAULT_CHECKSUM_ERRORS_POLL_MS,
  DEFAULT_INTERFACES,
  DEFAULT_OFFLOAD,
  DEFAULT_UDEV_ROOT,
} from '../core/defaults';
import { invalidArgument } from '../core/errors';
import {
  absolutePathOption,
  booleanOption,
  choiceOption,
  listOption,
  offloadOption,
  rejectUnknownOptions,
} from '../core/options';
import { fightPolicy, type FightPolicy } from './fight-tracker';
import { explicitMacSource, type DesiredMacSource } from './sources';
import {
  RANGES,
  compileInterfaceGlob,
  integerInRange,
  netnsTarget,
  type InterfaceGlob,
  type NetnsTarget,
} from '../core/validate';
import { autoOffloadPolicy, type AutoOffloadPolicy } from './offload-auto-policy';

export interface FlannelGuardOptions {
  /** Network namespace by `ip netns` name or absolute path; the process's own when omitted. */
  netns?: string;
  /**
   * Interface globs to manage (default flannel.* and flannel-v6.*). Only
   * devices of kind vxlan are ever managed: anything else a glob matches is
   * reported once (`ignored`) and never written to.
   */
  interfaces?: readonly string[];
  /** Desired MACs by interface name; these win over every other source. */
  mac?: Record<string, string>;
  /** Another source of desired MACs (e.g. the Kubernetes node annotation). */
  source?: DesiredMacSource;
  /**
   * For devices no source knows: 'first-seen' pins the MAC of the first
   * RTM_NEWLINK after creation (the one flannel publishes), or the current
   * MAC for devices that existed before the guard; 'none' leaves them alone.
   */
  pin?: 'first-seen' | 'none';
  /**
   * On a rewrite: 'revert' (default) sets the desired MAC back; 'adopt' keeps
   * the device's new MAC and has the source publish it (its `adopt`), so the
   * other nodes follow. Either way the flushed neighbour entries are restored.
   */
  strategy?: 'revert' | 'adopt';
  /**
   * Offload features to enforce (default tx-checksum-ip-generic off); 'none' leaves them alone;
   * 'auto' turns tx-checksum-ip-generic off only on a device where probes show it broken.
   */
  offload?: Readonly<Record<string, boolean>> | 'none' | 'auto';
  /** `offload: 'auto'`'s probing (rounds, confirmation, sample, re-check period). */
  autoOffload?: Partial<AutoOffloadPolicy>;
  /**
   * How often the namespace's receive checksum-error counters are read (default 2000 ms; 0:
   * never): a rise is reported (`checksumErrors`) and brings `offload: 'auto'`'s next probe
   * round forward.
   */
  checksumErrorsPollMs?: number;
  /** Report what would be done, never write. */
  dryRun?: boolean;
  /** Backoff and contested-state thresholds. */
  fight?: Partial<FightPolicy>;
  /** Netlink socket receive buffer in bytes. */
  receiveBuffer?: number;
  /**
   * Filter unrelated link notifications in the kernel (default true): a flood
   * of changes to other devices then never reaches the guard.
   */
  kernelFilter?: boolean;
  /**
   * When the named network namespace is deleted under the guard: 'close'
   * (default) reports an ENOENT error and closes; 'continue' reports it and
   * keeps guarding the devices the guard's sockets still hold.
   */
  onNetnsDeleted?: 'close' | 'continue';
  /**
   * Run even inside a user namespace other than the initial one (S11). Off by
   * default: there the guard's capabilities do not reach devices the host
   * owns, so it would be guarding a sandbox, not the node.
   */
  allowUserNamespace?: boolean;
  /**
   * Folder for the state that survives a crash (the permanent neighbour
   * entries and pinned MAC of each device, one file per namespace), read at
   * start: a flush that happened while the guard was down is restored from
   * it. Off when omitted; the CLI uses /run/flannel-guard.
   */
  stateDir?: string;
  /**
   * Where systemd-udevd's machine-id, `.link` files and database are read, to name the writer
   * of a rewrite with evidence (default '/'; a container mounts the host's). `false`: not read.
   */
  udevRoot?: string | false;
}

export interface GuardConfig {
  /** null: the process's own namespace. */
  readonly netns: NetnsTarget | null;
  readonly interfaces: readonly InterfaceGlob[];
  /** The explicit MACs (option `mac`), parsed; they win over `source`. */
  readonly explicit: DesiredMacSource | undefined;
  readonly source: DesiredMacSource | undefined;
  readonly pinFirstSeen: boolean;
  readonly strategy: 'revert' | 'adopt';
  /** null: no fixed policy (offloads left alone, or measured: `autoOffload`). */
  readonly offload: Readonly<Record<string, boolean>> | null;
  /** `--offload auto`: the probing; null otherwise. */
  readonly autoOffload: AutoOffloadPolicy | null;
  readonly checksumErrorsPollMs: number;
  readonly fight: Readonly<FightPolicy>;
  readonly dryRun: boolean;
  readonly kernelFilter: boolean;
  readonly receiveBuffer: number | undefined;
  readonly stateDir: string | undefined;
  readonly allowUserNamespace: boolean;
  readonly onNetnsDeleted: 'close' | 'continue';
  readonly udevRoot: string | null;
}

/** Every name FlannelGuardOptions declares: anything else is a caller's mistake (EINVAL). */
const OPTION_NAMES = [
  'netns',
  'interfaces',
  'mac',
  'source',
  'pin',
  'strategy',
  'offload',
  'autoOffload',
  'checksumErrorsPollMs',
  'dryRun',
  'fight',
  'receiveBuffer',
  'kernelFilter',
  'onNetnsDeleted',
  'allowUserNamespace',
  'stateDir',
  'udevRoot',
] as const satisfies readonly (keyof FlannelGuardOptions)[];

function macSourceOption(source: DesiredMacSource | undefined): DesiredMacSource | undefined {
  // A JavaScript caller may pass anything.
  const given: unknown = source;
  if (
    given !== undefined &&
    (typeof given !== 'object' ||
      given === null ||
      typeof (given as Partial<DesiredMacSource>).desiredMac !== 'function')
  ) {
    throw invalidArgument('option source: expected a DesiredMacSource (desiredMac(device))', {
      option: 'source',
    });
  }
  return source;
}

function strategyFor(
  strategy: GuardConfig['strategy'],
  source: DesiredMacSource | undefined,
): GuardConfig['strategy'] {
  if (strategy === 'adopt' && !source?.adopt) {
    throw invalidArgument(
      "strategy 'adopt' needs a source that can store a MAC (the Kubernetes node annotation)",
      { option: 'strategy' },
    );
  }
  return strategy;
}

/**
 * `config` with the source that was opened after it was parsed (the CLI checks every flag
 * before it reaches the cluster) and the strategy that needs it.
 */
export function withSource(
  config: GuardConfig,
  source: DesiredMacSource,
  strategy: GuardConfig['strategy'],
): GuardConfig {
  return Object.freeze({ ...config, source, strategy: strategyFor(strategy, source) });
}

/**
 * Validates, defaults and compiles `options` once: an unknown name or a wrong value is EINVAL
 * naming the option, with the message the CLI gives for the same input.
 */
export function guardConfig(options: FlannelGuardOptions = {}): GuardConfig {
  rejectUnknownOptions(options, OPTION_NAMES, 'FlannelGuard');
  const source = macSourceOption(options.source);
  const strategy = strategyFor(
    choiceOption(options.strategy, ['revert', 'adopt'], 'strategy', 'revert'),
    source,
  );
  const offload = offloadOption(options.offload, ['none', 'auto']) ?? DEFAULT_OFFLOAD;
  if (options.autoOffload !== undefined && offload !== 'auto') {
    throw invalidArgument("option autoOffload is only read with offload 'auto'", {
      option: 'autoOffload',
    });
  }
  return Object.freeze({
    netns: netnsTarget(options.netns),
    interfaces: Object.freeze(
      listOption(options.interfaces ?? DEFAULT_INTERFACES, 'interfaces', (glob) =>
        compileInterfaceGlob(glob),
      ),
    ),
    explicit: options.mac === undefined ? undefined : explicitMacSource(options.mac),
    source,
    pinFirstSeen:
      choiceOption(options.pin, ['first-seen', 'none'], 'pin', 'first-seen') === 'first-seen',
    strategy,
    autoOffload: offload === 'auto' ? autoOffloadPolicy(options.autoOffload) : null,
    offload: offload === 'none' || offload === 'auto' ? null : offload,
    checksumErrorsPollMs: integerInRange(
      options.checksumErrorsPollMs ?? DEFAULT_CHECKSUM_ERRORS_POLL_MS,
      { ...RANGES.timerMs, min: 0 },
      'checksumErrorsPollMs',
    ),
    fight: Object.freeze(fightPolicy(options.fight)),
    dryRun: booleanOption(options.dryRun, 'dryRun', false),
    kernelFilter: booleanOption(options.kernelFilter, 'kernelFilter', true),
    receiveBuffer:
      options.receiveBuffer === undefined
        ? undefined
        : integerInRange(options.receiveBuffer, RANGES.receiveBuffer, 'receiveBuffer'),
    stateDir:
      options.stateDir === undefined ? undefined : absolutePathOption(options.stateDir, 'stateDir'),
    allowUserNamespace: booleanOption(options.allowUserNamespace, 'allowUserNamespace', false),
    onNetnsDeleted: choiceOption(
      options.onNetnsDeleted,
      ['close', 'continue'],
      'onNetnsDeleted',
      'close',
    ),
    udevRoot:
      options.udevRoot === false
        ? null
        : absolutePathOption(options.udevRoot ?? DEFAULT_UDEV_ROOT, 'udevRoot'),
  });
}
