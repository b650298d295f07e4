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
export { FlannelGuard, DEFAULT_INTERFACES, DEFAULT_OFFLOAD } from './guard';
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
export { explicitMacSource } from './sources';
export type { DesiredMacSource } from './sources';
export { readStatus } from './status';
export type { OffloadStatus, StatusDevice, StatusOptions, StatusReport } from './status';
export {
  ADDRESS_FAMILIES,
  DEFAULT_ANNOTATION_PREFIX,
  EVENT_COMPONENT,
  EVENT_REASONS,
  EventRecorder,
  GuardHealth,
  GuardMetrics,
  KubernetesApiError,
  KubernetesMacSource,
  backendDataKey,
  createKubernetesClient,
  detectCluster,
  isKubernetesApiError,
  nodeReference,
  parseListenAddress,
  readBackendData,
  recordGuardEvents,
  startMetricsServer,
  vtepDeviceName,
  withVtepMac,
} from './kubernetes';
export type {
  AddressFamily,
  AdoptEvent,
  BackendDataReading,
  ClusterSettings,
  DroppedEvent,
  EventRecorderOptions,
  GuardEventOptions,
  GuardMetricsOptions,
  HealthReport,
  InvolvedObject,
  KubeEvent,
  KubeNode,
  KubernetesApi,
  KubernetesClientOptions,
  KubernetesMacSourceEvents,
  KubernetesMacSourceOptions,
  ListenAddress,
  MetricsServer,
  MetricsServerOptions,
  RecordedEvent,
  SourceProblem,
  SourceState,
  SourceStatus,
  WatchRestartEvent,
} from './kubernetes';
export { ENSURE_DEFAULT_OFFLOAD, ensureVtep, parsePeerSpec } from './ensure';
export type {
  Drift,
  DriftKind,
  EnsureAction,
  EnsureVtepOptions,
  EnsureVtepResult,
  PeerExpectation,
} from './ensure';
export { CHECK_IDS, DOCTOR_SCHEMA, runDoctor } from './doctor/index';
export type {
  CheckId,
  CheckResult,
  DoctorChange,
  DoctorOptions,
  DoctorReport,
  Verdict,
} from './doctor/index';
