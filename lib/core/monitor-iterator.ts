/**
 * LinkMonitor's events as an async iterator (`for await (const event of monitor.events())`):
 * queued while nobody reads, up to a limit (then the queue holds one `overrun` and drops the
 * rest until it is read), done at `close`, rejected with an AbortError when the signal aborts.
 */
import type { EventEmitter } from 'node:events';

import {
  LINK_MONITOR_EVENTS,
  type LinkMonitorEvent,
  type LinkMonitorEvents,
} from './monitor-events';

function abortError(signal: AbortSignal): Error {
  const error = new Error('The operation was aborted', { cause: signal.reason });
  error.name = 'AbortError';
  return Object.assign(error, { code: 'ABORT_ERR' });
}

export function iterateEvents(
  monitor: EventEmitter<LinkMonitorEvents>,
  options: {
    signal: AbortSignal | undefined;
    /** The monitor is closed already: the iterator is done at once. */
    closed: boolean;
    queueLimit: number;
    onQueueOverrun: () => void;
  },
): AsyncIterableIterator<LinkMonitorEvent> {
  const { signal, queueLimit, onQueueOverrun } = options;
  const queue: LinkMonitorEvent[] = [];
  const waiting: {
    resolve: (r: IteratorResult<LinkMonitorEvent>) => void;
    reject: (e: Error) => void;
  }[] = [];
  let finished = options.closed;
  let failure: Error | undefined = signal?.aborted ? abortError(signal) : undefined;

  // After an overflow the queue holds only the overrun marker until it is read:
  // the events in between are dropped, not queued again.
  let overflowed = false;
  const push = (event: LinkMonitorEvent): void => {
    const waiter = waiting.shift();
    if (waiter) {
      waiter.resolve({ value: event, done: false });
      return;
    }
    if (overflowed) return;
    if (queue.length >= queueLimit) {
      queue.length = 0;
      queue.push({ type: 'overrun', cause: 'queue' });
      overflowed = true;
      onQueueOverrun();
      return;
    }
    queue.push(event);
  };
  const listeners = LINK_MONITOR_EVENTS.map((type) => {
    const listener = (payload?: object): void => push({ type, ...payload } as LinkMonitorEvent);
    monitor.on(type, listener);
    return [type, listener] as const;
  });
  const cleanup = (): void => {
    finished = true;
    for (const [type, listener] of listeners) monitor.off(type, listener);
    monitor.off('close', onClose);
    signal?.removeEventListener('abort', onAbort);
    for (const waiter of waiting.splice(0)) {
      if (failure) waiter.reject(failure);
      else waiter.resolve({ value: undefined, done: true });
    }
  };
  const onClose = (): void => cleanup();
  const onAbort = (): void => {
    if (signal) failure = abortError(signal);
    queue.length = 0;
    cleanup();
  };
  monitor.on('close', onClose);
  signal?.addEventListener('abort', onAbort, { once: true });
  if (finished || failure) cleanup();

  const iterator: AsyncIterableIterator<LinkMonitorEvent> = {
    next: () => {
      const event = queue.shift();
      if (event) {
        if (queue.length === 0) overflowed = false;
        return Promise.resolve({ value: event, done: false });
      }
      if (failure) return Promise.reject(failure);
      if (finished) return Promise.resolve({ value: undefined, done: true });
      return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
    },
    return: () => {
      queue.length = 0;
      cleanup();
      return Promise.resolve({ value: undefined, done: true });
    },
    [Symbol.asyncIterator]: () => iterator,
  };
  return iterator;
}
