/**
 * worker_threads side of test/lifecycle.test.ts. Started with `workerData: WorkerTask`; talks
 * to the main thread only through `WorkerMessage`s.
 */
import { parentPort, workerData } from 'node:worker_threads';

import { binding } from '../../lib/core/binding';
import { LinkMonitor } from '../../lib/core/monitor';
import { getFeatures, getLink, setLinkMac } from '../../lib/core/oneshot';
import type { LinkInfo } from '../../lib/core/types';
import { reportError, type ErrorReport } from './lifecycle-child';

export type WorkerTask =
  /** Open a monitor, wait for `ifb` to be added, then write and read through the one-shot API. */
  | { mode: 'observe'; netns: string; ifb: string; device: string; mac: string }
  /** Open a monitor and report every link it sees added (from a timer), until terminated. */
  | { mode: 'poll'; netns: string }
  /** Open a monitor, close it, and let the worker end by itself. */
  | { mode: 'close'; netns: string }
  /** Open a monitor, unref it, and let the worker end by itself. */
  | { mode: 'unref'; netns: string }
  /** A linkAdded listener throws. */
  | { mode: 'throw'; netns: string; ifb: string };

export type WorkerMessage =
  | { type: 'ready'; netnsInode: number; links: string[] }
  | {
      type: 'observed';
      added: LinkInfo;
      created: boolean;
      setMac: { changed: boolean; previous: string | null; mac: string; ifindex: number };
      readBack: string | null;
      featureCount: number;
      txChecksum: boolean | null;
      missing: ErrorReport;
      closeEvents: number;
    }
  | { type: 'seen'; name: string }
  | { type: 'closed'; closeEvents: number }
  | { type: 'failed'; error: ErrorReport };

function post(message: WorkerMessage): void {
  parentPort?.postMessage(message);
}

async function observe(task: Extract<WorkerTask, { mode: 'observe' }>): Promise<void> {
  const monitor = await LinkMonitor.open({ netns: task.netns });
  let closeEvents = 0;
  monitor.on('close', () => {
    closeEvents += 1;
  });
  const added = new Promise<{ link: LinkInfo; created: boolean }>((resolve) => {
    monitor.on('linkAdded', (event) => {
      if (event.link.name === task.ifb) resolve({ link: event.link, created: event.created });
    });
  });
  post({
    type: 'ready',
    netnsInode: binding.netnsInode(),
    links: monitor.links().map((link) => link.name),
  });
  const event = await added;
  const setMac = await setLinkMac(task.device, task.mac, { netns: task.netns });
  const readBack = (await getLink(task.device, { netns: task.netns })).mac;
  const table = await getFeatures(task.device, { netns: task.netns });
  let missing: ErrorReport = { name: 'none', message: 'getLink(nope0) did not fail' };
  try {
    await getLink('nope0', { netns: task.netns });
  } catch (error) {
    missing = reportError(error);
  }
  monitor.close();
  post({
    type: 'observed',
    added: event.link,
    created: event.created,
    setMac: {
      changed: setMac.changed,
      previous: setMac.previous,
      mac: setMac.mac,
      ifindex: setMac.ifindex,
    },
    readBack,
    featureCount: table.features.length,
    txChecksum: table.features.find((f) => f.name === 'tx-checksum-ip-generic')?.active ?? null,
    missing,
    closeEvents,
  });
}

async function poll(task: Extract<WorkerTask, { mode: 'poll' }>): Promise<void> {
  const monitor = await LinkMonitor.open({ netns: task.netns });
  // Reported from a timer, after the batch callback has returned: the worker is then idle (its
  // monitor's reader thread waiting on the socket) when terminated. (A terminate() landing
  // inside the batch callback aborts the whole process - see the lifecycle report; that case is
  // not part of this suite.)
  monitor.on('linkAdded', (event) => {
    setTimeout(() => post({ type: 'seen', name: event.link.name }), 0);
  });
  post({
    type: 'ready',
    netnsInode: binding.netnsInode(),
    links: monitor.links().map((link) => link.name),
  });
}

async function closeAndEnd(task: Extract<WorkerTask, { mode: 'close' }>): Promise<void> {
  const monitor = await LinkMonitor.open({ netns: task.netns });
  let closeEvents = 0;
  monitor.on('close', () => {
    closeEvents += 1;
  });
  monitor.close();
  monitor.close();
  post({ type: 'closed', closeEvents });
}

async function unrefAndEnd(task: Extract<WorkerTask, { mode: 'unref' }>): Promise<void> {
  const monitor = await LinkMonitor.open({ netns: task.netns });
  monitor.unref();
  post({
    type: 'ready',
    netnsInode: binding.netnsInode(),
    links: monitor.links().map((link) => link.name),
  });
}

async function throwing(task: Extract<WorkerTask, { mode: 'throw' }>): Promise<void> {
  const monitor = await LinkMonitor.open({ netns: task.netns });
  monitor.on('linkAdded', (event) => {
    if (event.link.name === task.ifb) throw new Error(`boom in worker: ${event.link.name}`);
  });
  post({
    type: 'ready',
    netnsInode: binding.netnsInode(),
    links: monitor.links().map((link) => link.name),
  });
}

async function run(task: WorkerTask): Promise<void> {
  switch (task.mode) {
    case 'observe':
      return observe(task);
    case 'poll':
      return poll(task);
    case 'close':
      return closeAndEnd(task);
    case 'unref':
      return unrefAndEnd(task);
    case 'throw':
      return throwing(task);
  }
}

if (parentPort !== null) {
  run(workerData as WorkerTask).catch((error: unknown) => {
    post({ type: 'failed', error: reportError(error) });
  });
}
