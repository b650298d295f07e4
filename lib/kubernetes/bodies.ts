/**
 * The shapes the API server takes and gives for the objects the guard writes: Event bodies for
 * events.k8s.io/v1 and core/v1, and what is kept of a stored object (its metadata, an Event's
 * name, namespace, API and count).
 */
import type { EventApi, KubeEvent, KubeObjectMeta, StoredEvent } from './api';
import type { EventLike, ObjectMetaLike } from './client-node';

export function objectMeta(meta: ObjectMetaLike | undefined, what: string): KubeObjectMeta {
  if (!meta?.name) throw new Error(`${what}: the API server sent an object without metadata.name`);
  const result: KubeObjectMeta = { name: meta.name };
  if (meta.namespace !== undefined) result.namespace = meta.namespace;
  if (meta.uid !== undefined) result.uid = meta.uid;
  if (meta.resourceVersion !== undefined) result.resourceVersion = meta.resourceVersion;
  if (meta.annotations !== undefined) result.annotations = { ...meta.annotations };
  return result;
}

export function storedEvent(
  event: EventLike,
  namespace: string,
  api: EventApi,
  what: string,
): StoredEvent {
  const meta = objectMeta(event.metadata, what);
  return {
    name: meta.name,
    namespace: meta.namespace ?? namespace,
    resourceVersion: meta.resourceVersion,
    count: (api === 'v1' ? event.count : event.series?.count) ?? 1,
    api,
  };
}

/** events.k8s.io/v1 limits `note` to 1 kB (NoteLengthLimit); cut on a character boundary. */
export const EVENT_NOTE_LIMIT = 1024;

export function noteOf(message: string): string {
  if (Buffer.byteLength(message) <= EVENT_NOTE_LIMIT) return message;
  let note = message.slice(0, EVENT_NOTE_LIMIT);
  while (Buffer.byteLength(note) > EVENT_NOTE_LIMIT - 3) note = note.slice(0, -1);
  return `${note}...`;
}

/** A MicroTime as the API server parses it (RFC 3339 with exactly six fractional digits). */
export function microTime(at: Date): string {
  return at.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** The events.k8s.io/v1 body of an Event (the deprecated core fields left unset, as required). */
export function eventsV1Body(event: KubeEvent): object {
  return {
    apiVersion: 'events.k8s.io/v1',
    kind: 'Event',
    metadata: { name: event.metadata.name, namespace: event.metadata.namespace },
    eventTime: microTime(event.eventTime),
    reportingController: event.reportingComponent,
    reportingInstance: event.reportingInstance,
    action: event.action,
    reason: event.reason,
    regarding: event.involvedObject,
    note: noteOf(event.message),
    type: event.type,
  };
}

/** The core/v1 body: the recorder's Event without the events.k8s.io/v1-only fields. */
export function coreV1Body(event: KubeEvent): object {
  return {
    metadata: event.metadata,
    involvedObject: event.involvedObject,
    reason: event.reason,
    message: event.message,
    type: event.type,
    count: event.count,
    firstTimestamp: event.firstTimestamp,
    lastTimestamp: event.lastTimestamp,
    source: event.source,
    reportingComponent: event.reportingComponent,
    reportingInstance: event.reportingInstance,
  };
}
