/**
 * The guard's events as Kubernetes Events on its Node (through an EventRecorder): a rewrite, a
 * restore, an adoption, a contested device, what `--offload auto` changed, a second guard, the
 * onset of checksum errors and each sender of bad checksums, named by its Node where one
 * publishes its MAC.
 */
import {
  describeChecksumErrors,
  describeChecksumSender,
  type ChecksumErrorsEvent,
  type ChecksumSendersEvent,
  type FlannelGuard,
  type RewriteEvent,
  type SharedEvent,
  type VerdictEvent,
} from '../guard';
import { EVENT_REASONS, type EventRecorder, type InvolvedObject } from './event-recorder';
import type { PeerNodes } from './peer-nodes';

export interface GuardEventOptions {
  /** The Node the Events are about (its uid may only be known once the Node was read). */
  involvedObject: () => InvolvedObject;
  /** Named in the messages of adoptions. */
  annotation?: string;
  /** Names the Node behind a VTEP MAC that sends bad checksums; without it, its addresses do. */
  peerNodes?: Pick<PeerNodes, 'nodeFor'>;
}

/** The Node as kubelet names it in Events: kind Node, v1, its uid (or its name until known). */
export function nodeReference(name: string, uid?: string): InvolvedObject {
  return { kind: 'Node', apiVersion: 'v1', name, uid: uid ?? name };
}

/**
 * Records the guard's rewrite, restored, adopted and contested events as
 * Events on the Node. Returns a function that stops it.
 */
export function recordGuardEvents(
  guard: FlannelGuard,
  recorder: EventRecorder,
  options: GuardEventOptions,
): () => void {
  const lastRewrite = new Map<string, RewriteEvent>();
  const annotation = options.annotation ?? 'flannel.alpha.coreos.com/backend-data';
  const record = (type: 'Normal' | 'Warning', reason: string, message: string): void => {
    recorder.record(options.involvedObject(), type, reason, message);
  };
  const onRewrite = (e: RewriteEvent): void => {
    lastRewrite.set(e.device, e);
    const was =
      e.previous !== null && e.previous !== e.mac && e.previous !== e.expected
        ? `, was ${e.previous}`
        : '';
    record(
      'Warning',
      EVENT_REASONS.rewrite,
      `${e.device} has MAC ${e.mac ?? 'none'}${was}; the other nodes use ${e.expected}. Written by ${e.writer}: ${e.detail}${e.dryRun ? '. Dry run: not corrected' : ''}`,
    );
  };
  const onRestored = (e: { device: string; mac: string; neighbours: number }): void => {
    const rewrite = lastRewrite.get(e.device);
    const from = rewrite?.mac ? ` from ${rewrite.mac}` : '';
    record(
      'Normal',
      EVENT_REASONS.restored,
      `${e.device} MAC set back to ${e.mac}${from}; ${e.neighbours} permanent neighbour entries restored`,
    );
  };
  const onAdopted = (e: {
    device: string;
    mac: string;
    previous: string;
    neighbours: number;
  }): void => {
    record(
      'Normal',
      EVENT_REASONS.adopted,
      `${e.device} keeps MAC ${e.mac} instead of ${e.previous}: ${annotation} now publishes ${e.mac}, so the other nodes reprogram their ARP and FDB entries; ${e.neighbours} permanent neighbour entries restored`,
    );
  };
  const onContested = (e: { what: 'mac' | 'offload'; detail: string }): void => {
    record(
      'Warning',
      e.what === 'mac' ? EVENT_REASONS.contestedMac : EVENT_REASONS.contestedOffload,
      e.detail,
    );
  };
  // What --offload auto changed, with the measurement behind it (a verdict that changed nothing
  // is in the metrics, not an Event).
  const onVerdict = (e: VerdictEvent): void => {
    if (e.action === 'turned-off') {
      record(
        'Warning',
        EVENT_REASONS.offloadBroken,
        `${e.device}: ${e.feature} turned off: ${e.detail} (${e.rounds} probe rounds, ${e.probes} probes)`,
      );
    } else if (e.action === 'restored-on') {
      record('Warning', EVENT_REASONS.offloadUnverified, `${e.device}: ${e.detail}`);
    }
  };
  guard.on('rewrite', onRewrite);
  guard.on('restored', onRestored);
  guard.on('adopted', onAdopted);
  guard.on('contested', onContested);
  // Said when a second guard appears; its going is in the metrics and the log.
  const onShared = (e: SharedEvent): void => {
    if (e.others > 0) record('Warning', EVENT_REASONS.shared, e.detail);
  };
  // Said when the counters start rising; how much they keep rising is in the metrics.
  const onChecksumErrors = (e: ChecksumErrorsEvent): void => {
    if (e.onset) record('Warning', EVENT_REASONS.checksumErrors, describeChecksumErrors(e));
  };
  // One Event per sender (at most one sample a minute), naming its Node where the annotations do.
  const onChecksumSenders = (e: ChecksumSendersEvent): void => {
    for (const sender of e.senders) {
      void (options.peerNodes?.nodeFor(sender.mac) ?? Promise.resolve(null)).then((node) => {
        const who = node === null ? '' : `node ${node}: `;
        record(
          'Warning',
          EVENT_REASONS.checksumSender,
          `${e.device}: packets with bad checksums from ${who}${describeChecksumSender(sender)} in a ${(e.sampleMs / 1000).toFixed(1)} s sample; its TX checksum offload is broken: turn tx-checksum-ip-generic off there (--offload auto does it)`,
        );
      });
    }
  };
  guard.on('verdict', onVerdict);
  guard.on('shared', onShared);
  guard.on('checksumErrors', onChecksumErrors);
  guard.on('checksumSenders', onChecksumSenders);
  return () => {
    guard.off('checksumSenders', onChecksumSenders);
    guard.off('checksumErrors', onChecksumErrors);
    guard.off('shared', onShared);
    guard.off('rewrite', onRewrite);
    guard.off('restored', onRestored);
    guard.off('adopted', onAdopted);
    guard.off('contested', onContested);
    guard.off('verdict', onVerdict);
  };
}
