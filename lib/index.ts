/**
 * The package's entry point: what the README's "Exports" section lists, and nothing else (the
 * package test compares the two). The rest of the Kubernetes integration is the subpath
 * `flannel-guard/kubernetes`; everything else is internal.
 */
export { LinkMonitor } from './monitor';
export type {
  ChangeSource,
  LinkAddedEvent,
  LinkChangedEvent,
  LinkFilter,
  LinkKernelEvent,
  LinkMonitorEvent,
  LinkMonitorEvents,
  LinkMonitorOptions,
  LinkMonitorStats,
  LinkRemovedEvent,
  MonitorWarning,
  NativeCorrection,
  NeighbourAddedEvent,
  NeighbourChangedEvent,
  NeighbourRemovalCause,
  NeighbourRemovedEvent,
  OverrunEvent,
  ResyncEvent,
} from './monitor';
export {
  getDriverInfo,
  getFeatures,
  getLink,
  getLinks,
  getNeighbours,
  setFeatures,
  setLinkMac,
} from './oneshot';
export type { FeatureTable, NeighbourQuery, NetnsOptions, SetLinkMacResult } from './oneshot';
export type {
  DriverInfo,
  FeatureSetResult,
  FeatureState,
  LinkInfo,
  NeighbourFamily,
  NeighbourInfo,
  VxlanInfo,
} from './types';
export type { OperState } from './constants';
export { isSystemError } from './errors';
export type { SystemError, SystemErrorFields } from './errors';
export { compileInterfaceGlob, parseMac, validateInterfaceName } from './validate';
export { FlannelGuard } from './guard';
export { DEFAULT_INTERFACES, DEFAULT_OFFLOAD, guardConfig } from './guard-config';
export type { GuardConfig } from './guard-config';
export type { NetnsTarget } from './validate';
export type {
  AdoptedEvent,
  ContestedEvent,
  DeviceStatus,
  FlannelGuardEvents,
  FlannelGuardOptions,
  GuardCounters,
  GuardReadyEvent,
  IgnoredEvent,
  MacSourceKind,
  OffloadEvent,
  ReleasedEvent,
  RestoredEvent,
  ResumedEvent,
  RewriteCause,
  RewriteEvent,
} from './guard';
export { DEFAULT_FIGHT_POLICY } from './fight';
export type { FightPolicy } from './fight';
export type { DesiredMacSource } from './sources';
export { KubernetesMacSource } from './kubernetes/source';
export type {
  KubernetesMacSourceEvents,
  KubernetesMacSourceOptions,
  SourceProblem,
  SourceState,
  SourceStatus,
} from './kubernetes/source';
export { createKubernetesClient } from './kubernetes/client';
export type { KubernetesApi, KubernetesClientOptions } from './kubernetes/client';
export { ensureVtep } from './ensure';
export type {
  Drift,
  DriftKind,
  EnsureAction,
  EnsureVtepOptions,
  EnsureVtepResult,
  PeerExpectation,
} from './ensure';
export { runDoctor } from './doctor/index';
export type {
  CheckId,
  CheckResult,
  DoctorChange,
  DoctorOptions,
  DoctorReport,
  Verdict,
} from './doctor/index';
