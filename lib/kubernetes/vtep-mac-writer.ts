/**
 * Stores a new VtepMAC in the Node's backend-data annotation (KubernetesMacSource.adopt): a
 * JSON merge patch of that one annotation (every other annotation and every other field of its
 * value kept), carrying the resourceVersion it was computed from, so a concurrent writer makes
 * it fail with 409 Conflict; it is then recomputed from a fresh read and retried. An API that
 * does not answer is retried with the source's backoff until the deadline.
 */
import { invalidArgument, messageOf } from '../core/errors';
import { readBackendData, withVtepMac, type AddressFamily } from './annotation';
import { isKubernetesApiError, type KubeNode, type KubernetesApi } from './api';

export interface AdoptEvent {
  device: string;
  mac: string;
  /** The MAC the annotation published before. */
  previous: string;
  annotation: string;
  result: 'stored' | 'failed';
  attempts: number;
  /** 409 Conflicts met (and retried). */
  conflicts: number;
  resourceVersion?: string;
  error?: string;
}

/** What the writer may use of the source it writes for. */
export interface VtepMacWriterPorts {
  api: Pick<KubernetesApi, 'getNode' | 'patchNode'>;
  nodeName: string;
  annotationPrefix: string;
  /** Conflicts retried before giving up. */
  maxConflicts: number;
  /** How long an unreachable API is retried (ms). */
  timeoutMs: number;
  random: () => number;
  /** A Node read or written here, for the source to take. */
  seen(node: KubeNode): void;
  isClosed(): boolean;
  sleep(ms: number): Promise<void>;
  /** The wait before retry `failures` of an unreachable API. */
  retryDelay(failures: number): number;
  report(event: AdoptEvent): void;
}

export interface VtepMacWrite {
  family: AddressFamily;
  device: string;
  mac: string;
  /** The MAC the source has now, reported when no read happens. */
  previous: string;
  /** The Node as last read; undefined to read it first. */
  node: KubeNode | undefined;
}

export async function writeVtepMac(ports: VtepMacWriterPorts, write: VtepMacWrite): Promise<void> {
  const { family, device, mac } = write;
  const deadline = Date.now() + ports.timeoutMs;
  let attempts = 0;
  let conflicts = 0;
  let failures = 0;
  let previous = write.previous;
  const report = (result: AdoptEvent['result'], key: string, extra: Partial<AdoptEvent> = {}) => {
    ports.report({ device, mac, previous, annotation: key, result, attempts, conflicts, ...extra });
  };
  let node = write.node;
  for (;;) {
    if (ports.isClosed()) throw new Error(`adopt ${device}: the Kubernetes source is closed`);
    attempts += 1;
    try {
      if (!node) {
        node = await ports.api.getNode(ports.nodeName);
        ports.seen(node);
      }
    } catch (error) {
      if (isKubernetesApiError(error) && error.transient && Date.now() < deadline) {
        node = undefined;
        await ports.sleep(ports.retryDelay(++failures));
        continue;
      }
      throw error;
    }
    const reading = readBackendData(node.metadata.annotations, family, ports.annotationPrefix);
    if (reading.state !== 'valid' || reading.device !== device) {
      const why =
        reading.state === 'invalid'
          ? `is invalid (${reading.reason})`
          : reading.state === 'absent'
            ? 'is missing'
            : `names ${reading.device}`;
      const error = invalidArgument(
        `adopt ${device}: ${reading.key} on node ${ports.nodeName} ${why}; not writing it`,
      );
      report('failed', reading.key, { error: error.message });
      throw error;
    }
    previous = reading.mac;
    if (reading.mac === mac) {
      report('stored', reading.key, { resourceVersion: node.metadata.resourceVersion ?? '' });
      return;
    }
    const patch = {
      metadata: {
        resourceVersion: node.metadata.resourceVersion,
        annotations: { [reading.key]: withVtepMac(reading.data, mac) },
      },
    };
    try {
      const updated = await ports.api.patchNode(ports.nodeName, patch);
      ports.seen(updated);
      report('stored', reading.key, { resourceVersion: updated.metadata.resourceVersion ?? '' });
      return;
    } catch (error) {
      if (isKubernetesApiError(error) && error.statusCode === 409) {
        conflicts += 1;
        if (conflicts > ports.maxConflicts) {
          report('failed', reading.key, { error: messageOf(error) });
          throw error;
        }
        // Someone else changed the Node: recompute from a fresh read.
        node = undefined;
        await ports.sleep(Math.round(20 + ports.random() * 80));
        continue;
      }
      if (isKubernetesApiError(error) && error.transient && Date.now() < deadline) {
        await ports.sleep(ports.retryDelay(++failures));
        continue;
      }
      report('failed', reading.key, { error: messageOf(error) });
      throw error;
    }
  }
}
