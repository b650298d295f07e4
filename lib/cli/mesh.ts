/**
 * `watch --mesh`: the mesh view of this node (mesh/view.ts) fed by one watch of every Node,
 * its verdicts and repairs as log lines, Kubernetes Events on this Node naming the peer, and
 * metrics. Started once the guard exists: the view reads and writes the guard's own devices.
 */
import type { FlannelGuard } from '../guard';
import { messageOf } from '../core/errors';
import type { KubernetesApi } from '../kubernetes/api';
import {
  EVENT_REASONS,
  type EventRecorder,
  type InvolvedObject,
} from '../kubernetes/event-recorder';
import { MeshNodeWatch } from '../kubernetes/mesh-peers';
import type { GuardMetrics } from '../kubernetes/metrics';
import { isHealthyVerdict } from '../mesh/compare';
import { MeshView, type MeshMode, type MeshVerdictEvent } from '../mesh/view';
import type { LogLine } from './log-line';

export interface MeshSettings {
  mode: MeshMode;
  graceMs: number;
  directRouting: boolean;
}

export interface MeshServiceOptions {
  api: KubernetesApi;
  nodeName: string;
  annotationPrefix: string;
  settings: MeshSettings;
  log: LogLine;
  metrics: GuardMetrics | undefined;
  recorder: EventRecorder | undefined;
  involvedObject: () => InvolvedObject;
}

/** One readable line for a verdict change. */
export function describeVerdict(e: MeshVerdictEvent): string {
  const subject = e.subject;
  if (subject.kind === 'orphan') {
    const { entry } = subject;
    const what =
      entry.kind === 'arp'
        ? `ARP ${entry.destination ?? '-'} lladdr ${entry.lladdr}`
        : `FDB ${entry.lladdr} dst ${entry.destination ?? '-'}`;
    return `mesh: ${entry.device} ${what}: ${e.verdict === 'gone' ? 'gone' : 'no Node publishes it (orphan)'}`;
  }
  const row = subject.row;
  if (subject.kind === 'self') {
    return `mesh: this node's ${row.device} ${e.verdict} (device ${subject.row.deviceMac ?? 'absent'}, published ${row.publishedMac})`;
  }
  const peer = subject.row;
  const entries = `ARP ${peer.vtepIp} lladdr ${peer.arpMac ?? 'none'}, FDB ${peer.publishedMac} dst ${peer.fdbDst ?? 'none'}`;
  const published = `published ${peer.publishedMac} at ${peer.publicIp}`;
  const shared = peer.sharedWith ? `; also published by ${peer.sharedWith.join(', ')}` : '';
  const writer = e.writer === undefined ? '' : `; written back by netlink port ${e.writer}`;
  return `mesh: node ${peer.node} ${peer.family} ${e.verdict} (${entries}; ${published}${shared}${writer})`;
}

export function startMesh(
  guard: FlannelGuard,
  options: MeshServiceOptions,
): { view: MeshView; close: () => void } {
  const view = new MeshView({
    self: options.nodeName,
    mode: options.settings.mode,
    graceMs: options.settings.graceMs,
    directRouting: options.settings.directRouting,
    devices: guard.meshDevices(),
  });
  const { log, recorder } = options;
  const record = (type: 'Normal' | 'Warning', reason: string, message: string): void => {
    recorder?.record(options.involvedObject(), type, reason, message);
  };
  view.on('verdict', (e) => {
    const text = describeVerdict(e);
    const fine = isHealthyVerdict(e.verdict) || e.verdict === 'gone';
    log('mesh', fine ? 'info' : 'warn', e, text);
    if (e.subject.kind !== 'peer' || fine) return;
    if (e.verdict === 'duplicate-mac') record('Warning', EVENT_REASONS.meshDuplicate, text);
    else if (e.verdict === 'contested') record('Warning', EVENT_REASONS.meshContested, text);
    else record('Warning', EVENT_REASONS.meshDiverged, text);
  });
  view.on('repaired', (e) => {
    const text = `mesh: node ${e.node} ${e.family} ${e.verdict}: ${e.device} ARP lladdr ${e.before.arpMac ?? 'none'} -> ${e.written.arpMac}, FDB dst ${e.before.fdbDst ?? 'none'} -> ${e.written.fdbDst}${e.error === undefined ? '' : ` not written: ${e.error}`}`;
    log('mesh-repair', e.error === undefined ? 'info' : 'warn', e, text);
    if (e.error === undefined) record('Normal', EVENT_REASONS.meshRepaired, text);
  });
  view.on('pruned', (e) => {
    const { entry } = e;
    const what =
      entry.kind === 'arp'
        ? `ARP ${entry.destination ?? '-'} lladdr ${entry.lladdr}`
        : `FDB ${entry.lladdr} dst ${entry.destination ?? '-'}`;
    const text = `mesh: ${entry.device} ${what}: no Node publishes it; ${e.error === undefined ? 'deleted' : `not deleted: ${e.error}`}`;
    log('mesh-prune', e.error === undefined ? 'info' : 'warn', e, text);
  });
  options.metrics?.observeMesh(view);
  const watch = new MeshNodeWatch({
    api: options.api,
    annotationPrefix: options.annotationPrefix,
    view,
    onProblem: (problem) => {
      const text = `mesh: ${problem.reading} nodes failed (${messageOf(problem.error)}); deploy/rbac.yaml grants list and watch on nodes`;
      log(
        'mesh-nodes',
        'warn',
        { reading: problem.reading, error: messageOf(problem.error) },
        text,
      );
    },
  });
  watch.start();
  return {
    view,
    close: () => {
      watch.close();
      view.close();
    },
  };
}
