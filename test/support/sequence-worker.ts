/**
 * worker_threads side of the sequence test (test/support/sequences.ts): one FlannelGuard,
 * started with `workerData: SequenceGuardOptions`, its events posted to the main thread. A
 * 'stop' message closes it as SIGTERM does; the main thread's terminate() is SIGKILL.
 */
import { parentPort, workerData } from 'node:worker_threads';

import { FlannelGuard } from '../../lib/guard';
import { guardConfig } from '../../lib/guard/config';
import type { FightPolicy } from '../../lib/guard/fight';

export interface SequenceGuardOptions {
  netns: string;
  mac: string;
  stateDir: string;
  dryRun: boolean;
  fight: Partial<FightPolicy>;
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

// Created, then listened to, then awaited: the corrections made at start are reported too.
let guard: FlannelGuard;
try {
  guard = FlannelGuard.create(
    guardConfig({
      netns: options.netns,
      mac: { 'flannel.1': options.mac },
      stateDir: options.stateDir,
      dryRun: options.dryRun,
      fight: options.fight,
      udevRoot: false,
    }),
  );
} catch (error) {
  post({ type: 'failed', message: error instanceof Error ? error.message : String(error) });
  port.close();
  throw error;
}
for (const event of EVENTS) {
  guard.on(event, (data?: unknown) => {
    const payload =
      data instanceof Error
        ? { message: data.message }
        : (JSON.parse(JSON.stringify(data ?? {})) as Record<string, unknown>);
    post({ type: 'event', event, data: payload });
  });
}
port.on('message', (message: unknown) => {
  if (message !== 'stop') return;
  guard.close();
  post({ type: 'closed' });
  port.close();
});
guard.ready().catch((error: unknown) => {
  post({ type: 'failed', message: error instanceof Error ? error.message : String(error) });
});
