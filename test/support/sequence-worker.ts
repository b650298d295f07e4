/**
 * worker_threads side of the sequence test (test/support/sequences.ts): one FlannelGuard,
 * started with `workerData: SequenceGuardOptions`, its events posted to the main thread. A
 * 'stop' message closes it as SIGTERM does; the main thread's terminate() is SIGKILL.
 */
import { parentPort, workerData } from 'node:worker_threads';

import { FlannelGuard } from '../../lib/guard';
import { guardConfig, type FlannelGuardOptions } from '../../lib/guard/config';
import type { FightPolicy } from '../../lib/guard/fight-tracker';
import { createKubernetesClient } from '../../lib/kubernetes/client';
import { DEFAULT_ANNOTATION_PREFIX } from '../../lib/kubernetes/annotation';
import type { KubernetesApi } from '../../lib/kubernetes/api';
import { MeshNodeWatch } from '../../lib/kubernetes/mesh-peers';
import { KubernetesMacSource } from '../../lib/kubernetes/source';
import { MeshView } from '../../lib/mesh/view';

export interface SequenceGuardOptions {
  netns: string;
  /** The desired MAC given by `--mac`, or the node annotation through a kubeconfig. */
  desired: { mac: string } | { kubeconfig: string; nodeName: string; strategy: 'revert' | 'adopt' };
  stateDir: string;
  dryRun: boolean;
  fight: Partial<FightPolicy>;
  /** With the annotation source: the mesh view too (repair; report under a dry run). */
  mesh?: { graceMs: number; fightWindowMs: number };
}

export type SequenceGuardMessage =
  | { type: 'event'; event: string; data: Record<string, unknown> }
  | { type: 'closed' }
  | { type: 'failed'; message: string };

const EVENTS = [
  'ready',
  'rewrite',
  'restored',
  'adopted',
  'contested',
  'resumed',
  'deferred',
  'released',
  'offload',
  'error',
] as const;

const options = workerData as SequenceGuardOptions;
const port = parentPort;
if (!port) throw new Error('sequence-worker runs in a worker thread');
const post = (message: SequenceGuardMessage): void => {
  port.postMessage(message);
};

const failed = (error: unknown): void => {
  post({ type: 'failed', message: error instanceof Error ? error.message : String(error) });
};

/** The node annotation as the CLI reads it, synced before the guard starts. */
async function kubernetesSource(
  desired: Extract<SequenceGuardOptions['desired'], { kubeconfig: string }>,
): Promise<{ source: KubernetesMacSource; api: KubernetesApi; close: () => void }> {
  const api = await createKubernetesClient({ kubeconfig: desired.kubeconfig });
  const source = new KubernetesMacSource({
    api,
    nodeName: desired.nodeName,
    backoff: { initialMs: 50, maxMs: 400 },
  }).start();
  const status = await source.waitForSync(5000);
  if (status.state !== 'synced') throw new Error(`source ${status.state}`);
  return {
    source,
    api,
    close: () => {
      source.close();
      api.close();
    },
  };
}

async function start(): Promise<void> {
  const desired = options.desired;
  let closeSource = (): void => undefined;
  let api: KubernetesApi | undefined;
  let wanted: Pick<FlannelGuardOptions, 'mac' | 'source' | 'strategy'>;
  if ('kubeconfig' in desired) {
    const kubernetes = await kubernetesSource(desired);
    closeSource = kubernetes.close;
    api = kubernetes.api;
    wanted = { source: kubernetes.source, strategy: desired.strategy };
  } else {
    wanted = { mac: { 'flannel.1': desired.mac } };
  }
  // Created, then listened to, then awaited: the corrections made at start are reported too.
  const guard = FlannelGuard.create(
    guardConfig({
      netns: options.netns,
      ...wanted,
      stateDir: options.stateDir,
      dryRun: options.dryRun,
      fight: options.fight,
      udevRoot: false,
    }),
  );
  let closeMesh = (): void => undefined;
  listen(guard, () => {
    closeMesh();
    closeSource();
  });
  await guard.ready();
  if (options.mesh && api && 'kubeconfig' in desired) {
    const view = new MeshView({
      self: desired.nodeName,
      mode: options.dryRun ? 'report' : 'repair',
      ...options.mesh,
      devices: guard.meshDevices(),
    });
    for (const event of ['verdict', 'repaired'] as const) {
      view.on(event, (data: unknown) => {
        const payload = JSON.parse(JSON.stringify(data)) as Record<string, unknown>;
        post({ type: 'event', event: `mesh-${event}`, data: payload });
      });
    }
    const watch = new MeshNodeWatch({ api, annotationPrefix: DEFAULT_ANNOTATION_PREFIX, view });
    watch.start();
    closeMesh = () => {
      watch.close();
      view.close();
    };
  }
}

function listen(guard: FlannelGuard, closeSource: () => void): void {
  for (const event of EVENTS) {
    guard.on(event, (data?: unknown) => {
      const payload =
        data instanceof Error
          ? { message: data.message }
          : (JSON.parse(JSON.stringify(data ?? {})) as Record<string, unknown>);
      post({ type: 'event', event, data: payload });
    });
  }
  port?.on('message', (message: unknown) => {
    if (message !== 'stop') return;
    guard.close();
    closeSource();
    post({ type: 'closed' });
    port.close();
  });
}

start().catch(failed);
