/**
 * The package's entry point: what the README's "Exports" section lists, and nothing else (the
 * package test compares the two). The rest of the Kubernetes integration is the subpath
 * `flannel-guard/kubernetes`; everything else is internal.
 */
export { LinkMonitor } from './core/monitor';
export type { CorrectionAllowance, LinkFilter, LinkMonitorOptions } from './core/monitor';
export type {
  ChangeSource,
  LinkAddedEvent,
  LinkChangedEvent,
  LinkKernelEvent,
  LinkMonitorEvent,
  LinkMonitorEvents,
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
} from './core/monitor-events';
export {
  getChecksumErrors,
  getDriverInfo,
  getFeatures,
  getLink,
  getLinks,
  getNeighbours,
  setFeatures,
  setLinkMac,
} from './core/oneshot';
export type { FeatureTable, NeighbourQuery, NetnsOptions, SetLinkMacResult } from './core/oneshot';
export type {
  ChecksumErrorCounters,
  DriverInfo,
  FeatureSetResult,
  FeatureState,
  LinkInfo,
  NeighbourFamily,
  NeighbourInfo,
  VxlanInfo,
} from './core/types';
export type { OperState } from './core/constants';
export { isSystemError } from './core/errors';
export type { SystemError, SystemErrorFields } from './core/errors';
export { compileInterfaceGlob, parseMac, validateInterfaceName } from './core/validate';
export { FlannelGuard } from './guard';
export { DEFAULT_INTERFACES, DEFAULT_OFFLOAD } from './core/defaults';
export { guardConfig } from './guard/config';
export type { GuardConfig } from './guard/config';
export type { NetnsTarget } from './core/validate';
export type {
  AdoptedEvent,
  ChecksumErrorsEvent,
  ChecksumSender,
  ChecksumSendersEvent,
  ContestedEvent,
  DeferredEvent,
  DeviceStatus,
  FlannelGuardEvents,
  FlannelGuardOptions,
  GuardCounters,
  GuardReadyEvent,
  IgnoredEvent,
  MacSourceKind,
  OffloadEvent,
  PathAnswer,
  ReleasedEvent,
  RestoredEvent,
  ResumedEvent,
  RewriteEvent,
  RewriteFound,
  SharedEvent,
  VerdictEvent,
} from './guard';
export type { AutoOffloadPolicy } from './guard/offload-auto-policy';
export { compareMesh } from './mesh/compare';
export type {
  IncompletePeer,
  MeshFamily,
  MeshInput,
  MeshTable,
  OrphanEntry,
  PeerLease,
  PeerRow,
  PeerVerdict,
  SelfRow,
} from './mesh/compare';
export { MeshView } from './mesh/view';
export type {
  MeshClock,
  MeshDevices,
  MeshMode,
  MeshRepairEvent,
  MeshSnapshot,
  MeshSubject,
  MeshVerdictEvent,
  MeshViewEvents,
  MeshViewOptions,
  NodeLeases,
  VtepEntryChange,
} from './mesh/view';
export { udevPersistentMac } from './udev/persistent-mac';
export type { MacWriter, WriterEvidence } from './udev/writer';
export { DEFAULT_FIGHT_POLICY } from './guard/fight-tracker';
export type { FightPolicy } from './guard/fight-tracker';
export type { DesiredMacSource } from './guard/sources';
export { KubernetesMacSource } from './kubernetes/source';
export type {
  KubernetesMacSourceEvents,
  KubernetesMacSourceOptions,
  SourceProblem,
  SourceState,
  SourceStatus,
} from './kubernetes/source';
export { createKubernetesClient } from './kubernetes/client';
export type { KubernetesApi } from './kubernetes/api';
export type { KubernetesClientOptions } from './kubernetes/client';
export { ensureVtep } from './ensure/ensure';
export type {
  Drift,
  DriftKind,
  EnsureAction,
  EnsureVtepOptions,
  EnsureVtepResult,
  PeerExpectation,
} from './ensure/ensure';
export { runDoctor } from './doctor/index';
export type {
  CheckId,
  CheckResult,
  DoctorChange,
  DoctorOptions,
  DoctorReport,
  Verdict,
} from './doctor/index';
