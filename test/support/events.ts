/** Awaiting typed events with a bound, instead of sleeping. */
import type { EventEmitter } from 'node:events';

/**
 * Resolves with the first `name` event whose payload satisfies `predicate`;
 * rejects after `timeoutMs`. Start waiting before causing the event.
 */
export function nextEvent<
  Events extends Record<keyof Events, unknown[]>,
  Name extends keyof Events & string,
>(
  emitter: EventEmitter<Events>,
  name: Name,
  predicate: (...args: Events[Name]) => boolean = () => true,
  timeoutMs = 5000,
): Promise<Events[Name]> {
  const untyped = emitter as unknown as EventEmitter;
  return new Promise((resolve, reject) => {
    const listener = (...args: unknown[]): void => {
      if (!predicate(...(args as Events[Name]))) return;
      clearTimeout(timer);
      untyped.off(name, listener);
      resolve(args as Events[Name]);
    };
    const timer = setTimeout(() => {
      untyped.off(name, listener);
      reject(new Error(`no '${name}' event within ${timeoutMs} ms`));
    }, timeoutMs);
    untyped.on(name, listener);
  });
}

/** Collects every `name` event into an array until `stop()` is called. */
export function collectEvents<
  Events extends Record<keyof Events, unknown[]>,
  Name extends keyof Events & string,
>(emitter: EventEmitter<Events>, name: Name): { events: Events[Name][0][]; stop: () => void } {
  const untyped = emitter as unknown as EventEmitter;
  const events: Events[Name][0][] = [];
  const listener = (payload: unknown): void => {
    events.push(payload as Events[Name][0]);
  };
  untyped.on(name, listener);
  return { events, stop: () => untyped.off(name, listener) };
}
