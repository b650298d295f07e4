/**
 * The guard's configuration, parsed once: every option validated, defaulted and compiled
 * (the namespace resolved, the globs compiled, the MACs parsed, the offload and fight
 * policies complete), then frozen and passed down unchanged. `FlannelGuard.start(options)`
 * makes one; the CLI makes one from its flags and opens the guard from it.
 */
import { invalidArgument } from './errors';
import { fightPolicy, type FightPolicy } from './fight';
import type { FlannelGuardOptions } from './guard';
import { explicitMacSource, type DesiredMacSource } from './sources';
import {
  compileInterfaceGlob,
  netnsTarget,
  type InterfaceGlob,
  type NetnsTarget,
} from './validate';

export const DEFAULT_INTERFACES = ['flannel.*', 'flannel-v6.*'] as const;
export const DEFAULT_OFFLOAD: Readonly<Record<string, boolean>> = Object.freeze({
  // The fix for broken VXLAN TX checksum offload; the kernel also drops TSO with it.
  'tx-checksum-ip-generic': false,
});

export interface GuardConfig {
  /** null: the process's own namespace. */
  readonly netns: NetnsTarget | null;
  readonly interfaces: readonly InterfaceGlob[];
  /** The explicit MACs (option `mac`), parsed; they win over `source`. */
  readonly explicit: DesiredMacSource | undefined;
  readonly source: DesiredMacSource | undefined;
  readonly pinFirstSeen: boolean;
  readonly strategy: 'revert' | 'adopt';
  /** null: offloads left alone. */
  readonly offload: Readonly<Record<string, boolean>> | null;
  readonly fight: Readonly<FightPolicy>;
  readonly dryRun: boolean;
  readonly kernelFilter: boolean;
  readonly receiveBuffer: number | undefined;
  readonly stateDir: string | undefined;
  readonly allowUserNamespace: boolean;
  readonly onNetnsDeleted: 'close' | 'continue';
}

/** Validates, defaults and compiles `options` once; throws EINVAL naming the option. */
export function guardConfig(options: FlannelGuardOptions = {}): GuardConfig {
  const strategy = options.strategy ?? 'revert';
  if (strategy === 'adopt' && !options.source?.adopt) {
    throw invalidArgument(
      "strategy 'adopt' needs a source that can store a MAC (the Kubernetes node annotation)",
      { option: 'strategy' },
    );
  }
  return Object.freeze({
    netns: netnsTarget(options.netns),
    interfaces: Object.freeze(
      (options.interfaces ?? DEFAULT_INTERFACES).map((glob) => compileInterfaceGlob(glob)),
    ),
    explicit: options.mac ? explicitMacSource(options.mac) : undefined,
    source: options.source,
    pinFirstSeen: (options.pin ?? 'first-seen') === 'first-seen',
    strategy,
    offload:
      options.offload === 'none'
        ? null
        : options.offload === undefined
          ? DEFAULT_OFFLOAD
          : Object.freeze({ ...options.offload }),
    fight: Object.freeze(fightPolicy(options.fight)),
    dryRun: options.dryRun ?? false,
    kernelFilter: options.kernelFilter ?? true,
    receiveBuffer: options.receiveBuffer,
    stateDir: options.stateDir,
    allowUserNamespace: options.allowUserNamespace ?? false,
    onNetnsDeleted: options.onNetnsDeleted ?? 'close',
  });
}
