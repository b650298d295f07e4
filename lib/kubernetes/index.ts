/**
 * The Kubernetes integration, the package's subpath `flannel-guard/kubernetes`: the node
 * annotation as the desired-MAC source, Events on the Node, Prometheus metrics and health
 * endpoints (the README's "Exports" section lists it; the package test compares the two).
 */
export {
  ADDRESS_FAMILIES,
  DEFAULT_ANNOTATION_PREFIX,
  backendDataKey,
  backendTypeKey,
  readBackendData,
  vtepDeviceName,
  withVtepMac,
} from './annotation';
export type { AddressFamily, BackendDataReading } from './annotation';
export { KubernetesApiError, isKubernetesApiError } from './api';
export { createKubernetesClient } from './client';
export type {
  EventApi,
  EventRepeat,
  KubeEvent,
  KubeNode,
  KubeObjectMeta,
  KubernetesApi,
  StoredEvent,
  WatchEnd,
  WatchEvent,
  WatchOptions,
  WatchStream,
} from './api';
export type { KubeconfigOrigin, KubernetesClientOptions } from './client';
export { SERVICE_ACCOUNT_TOKEN, detectCluster, validateNodeName } from './cluster';
export {
  LEGACY_NODE_CONDITION_TYPE,
  NODE_CONDITION_TYPE,
  NodeConditionReporter,
  VtepHealth,
} from './condition';
export type { NodeConditionEvents, NodeConditionOptions, NodeConditionValue } from './condition';
export type { ClusterOptions, ClusterSettings } from './cluster';
export { EVENT_COMPONENT, EVENT_REASONS, EventRecorder } from './event-recorder';
export type {
  DroppedEvent,
  EventDropReason,
  EventRecorderEvents,
  EventRecorderOptions,
  InvolvedObject,
  RecordedEvent,
} from './event-recorder';
export { nodeReference, recordGuardEvents, type GuardEventOptions } from './guard-events';
export { ADOPT_BUCKETS, GuardMetrics, LATENCY_BUCKETS, METRIC_PREFIX } from './metrics';
export type { GuardMetricsOptions } from './metrics';
export { parseListenAddress, type ListenAddress } from './listen';
export { GuardHealth, startMetricsServer } from './server';
export type { HealthReport, MetricsServer, MetricsServerOptions } from './server';
export { KubernetesMacSource } from './source';
export { MeshNodeWatch, readPeer } from './mesh-peers';
export type { MeshNodeWatchOptions } from './mesh-peers';
export type {
  AdoptEvent,
  KubernetesMacSourceEvents,
  KubernetesMacSourceOptions,
  SourceProblem,
  SourceState,
  SourceStatus,
  WatchRestartEvent,
  WatchRestartReason,
} from './source';
